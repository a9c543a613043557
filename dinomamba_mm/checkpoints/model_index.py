"""The entries of ``model-index.yml`` in mmpretrain's model hub, so that
``mmpretrain.get_model(NAME, pretrained=True)`` builds them by name: the released linear heads
with their teachers, and for an entry without published weights an error saying so.

Imported on use only (modelindex and mmpretrain.apis are not needed by ``import dinomamba_mm``).
"""
import os.path as osp
from typing import List

from modelindex.models.Model import Model

from .model_zoo import HUGGINGFACE_PREFIXES, fetch


class ZooEntry(Model):
    """An entry of ``model-index.yml`` in mmpretrain's model hub.

    mmpretrain's ``get_model(NAME, pretrained=True)`` reads ``weights`` only to load them; for
    an entry without published weights (no ``Weights`` field, as in mmpretrain's metafiles) it
    would build the model with random weights and a generic warning. Here ``weights`` raises a
    ValueError starting with 'no weights' that names the entries which have some, and a
    Hugging Face file is given as its checked download (:func:`.model_zoo.fetch`).
    """

    released = ()  # the names of the entries with weights, set by register_models

    @property
    def weights(self) -> str:
        weights = self.data.get('Weights')
        if weights is None:
            raise ValueError(self._no_weights())
        if weights.startswith(HUGGINGFACE_PREFIXES):
            # mmengine's URL loader, which get_model would use, caches by file name, and every
            # folder of the paper's repository holds the same two names: hand it our checked
            # copy, cached under its repository, revision and path
            return fetch(weights)
        return weights

    @weights.setter
    def weights(self, value: str) -> None:
        self.data['Weights'] = value

    def _no_weights(self) -> str:
        config = self.config
        scope = config.get('default_scope') if hasattr(config, 'get') else None
        path = getattr(config, 'filename', config)
        if scope in ('mmseg', 'mmdet'):
            untrained = (f'it is an {scope} model, which mmpretrain\'s get_model does not build: '
                         f'train it with tools/train.py {path}')
        else:
            untrained = (f'get_model({self.name!r}) builds it untrained; train it with '
                         f'tools/train.py {path}')
        return (f'no weights: no checkpoint of {self.name!r} is published ({untrained}). The '
                f'entries with the authors\' released weights are {list(self.released)}')


def register_models() -> List[str]:
    """Add this package's ``model-index.yml`` entries to mmpretrain's model hub.

    Afterwards ``mmpretrain.get_model``, ``list_models`` and the inferencers take their names,
    e.g. ``get_model('dinovim-base-p16_paper-teacher_paper-linear-head_in1k',
    pretrained=True)``; an entry without weights says so when ``pretrained=True``
    (:class:`ZooEntry`). Registering again replaces the entries.

    Returns:
        the names registered.

    Raises:
        FileNotFoundError: the package has no ``.mim/model-index.yml`` (a checkout that was
            not installed: ``pip install -e .`` creates it).
    """
    from mmpretrain.apis import ModelHub
    from modelindex.load_model_index import load

    root = osp.join(osp.dirname(osp.dirname(osp.abspath(__file__))), '.mim')
    index_path = osp.join(root, 'model-index.yml')
    if not osp.isfile(index_path):
        raise FileNotFoundError(f'{index_path} does not exist: dinomamba_mm is not installed '
                                '(pip install -e . links configs/ and model-index.yml there)')
    index = load(index_path)
    index.build_models_with_collections()
    released = tuple(sorted(model.name.lower() for model in index.models
                            if model.data.get('Weights') is not None))
    names = []
    for model in index.models:
        model.__class__ = ZooEntry  # the entry as modelindex read it, with ZooEntry.weights
        model.released = released
        model.config = osp.join(root, model.config)
        name = model.name.lower()
        # where ModelHub.register_model_index keeps the entries it reads (it refuses a second
        # registration of a name)
        ModelHub._models_dict[name] = model
        names.append(name)
    return names
