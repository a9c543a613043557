"""The weight initializers ``Pretrained`` and ``PaperCheckpoint``, through the one loader."""
import copy
from typing import List, Optional, Union

from mmengine.model.weight_init import PretrainedInit, update_init_info
from torch import nn

from dinomamba_mm.argument_checks import check_bool
from dinomamba_mm.registry import SCOPE, WEIGHT_INITIALIZERS
from .backbone_weights import NETWORKS
from .loading import load_checkpoint_into

InitCfg = Optional[Union[dict, List[dict]]]


@WEIGHT_INITIALIZERS.register_module(name='Pretrained')
class CheckedPretrainedInit(PretrainedInit):
    """``init_cfg=dict(type='Pretrained', checkpoint=..., prefix=...)`` with clear errors.

    Loads as mmengine's ``Pretrained`` does (the ``prefix`` part of the checkpoint's
    ``state_dict``, else the whole of it without a leading ``module.``; non-strict: missing and
    unexpected keys are logged), through :func:`~.loading.load_checkpoint_into`, which refuses,
    naming the checkpoint: a file that is missing, empty, truncated, corrupt or not a checkpoint;
    no key with the ``prefix``; none of the module's keys (the hint names the prefix that would
    fit, e.g. ``teacher.backbone.``); tensors of another shape; another token layout than the
    module's; NaN or Inf tensors (unless ``allow_non_finite=True``).

    It is registered as ``Pretrained`` in the ``dinomamba_mm`` scope; DinoVim and LinearViT
    route their ``Pretrained`` init_cfg here (:func:`checked_pretrained_cfg`), so configs keep
    ``type='Pretrained'``; other backbones reach it with ``_scope_='dinomamba_mm'`` in the
    init_cfg (the ViT configs).

    Args:
        checkpoint (str): path or URL.
        prefix (str, optional): key prefix of the module's weights; None for the whole state
            dict.
        map_location (str): as :func:`torch.load`'s.
        allow_non_finite (bool): load tensors holding NaN or Inf.
    """
    strict = False
    network = 'teacher'

    def __init__(self, checkpoint: str, prefix: Optional[str] = None,
                 map_location: str = 'cpu', allow_non_finite: bool = False) -> None:
        super().__init__(checkpoint, prefix=prefix, map_location=map_location)
        check_bool('allow_non_finite', allow_non_finite)
        self.allow_non_finite = allow_non_finite

    def __call__(self, module: nn.Module) -> None:
        load_checkpoint_into(module, self.checkpoint, self.prefix, self.network, self.strict,
                             self.allow_non_finite, self.map_location,
                             advice="Set the init_cfg prefix to the part in front of the "
                             "module's keys")
        if hasattr(module, '_params_init_info'):
            update_init_info(module, init_info=self._get_init_info())


@WEIGHT_INITIALIZERS.register_module(name='PaperCheckpoint')
class PaperCheckpointInit(CheckedPretrainedInit):
    """``Pretrained``, strict, for the paper's files: every key must match.

    Use as the backbone's ``init_cfg``::

        init_cfg=dict(type='dinomamba_mm.PaperCheckpoint',
                      checkpoint=('https://huggingface.co/TimingYang/Dino-Mamba/resolve/main/'
                                  'Vim/Base/checkpoint.pth'),
                      source='teacher')

    ``checkpoint`` holds a raw paper checkpoint ('teacher' / 'student' state dicts), an
    mmengine checkpoint (e.g. from ``tools/model_converters/dinomamba_to_mmpretrain.py``) or a
    bare backbone state dict, in the paper's or our key names. The paper's files give its
    features with ``token_layout='paper'`` (and ``img_size=112`` for MambaR).

    Args:
        checkpoint (str): path or URL.
        source (str): 'teacher' or 'student', for raw paper checkpoints.
        prefix (str, optional): key prefix of the backbone in mmengine checkpoints; 'auto'
            takes ``teacher.backbone.``, else ``backbone.``, else the whole state dict.
        map_location (str): as :func:`torch.load`'s.
        allow_non_finite (bool): load tensors holding NaN or Inf.
    """
    strict = True

    def __init__(self, checkpoint: str, source: str = 'teacher', prefix: Optional[str] = 'auto',
                 map_location: str = 'cpu', allow_non_finite: bool = False) -> None:
        if source not in NETWORKS:
            raise ValueError(f'source must be one of {NETWORKS}, got {source!r}')
        super().__init__(checkpoint, prefix, map_location, allow_non_finite)
        self.network = source

    def __call__(self, module: nn.Module) -> None:
        # not a 'Pretrained' type: mmengine applies it before the module's own initialisation,
        # which leaves DinoVim's weights alone (made at construction) but not other modules'
        if not hasattr(module, 'token_layout'):
            raise ValueError(f'PaperCheckpoint loads the paper\'s DinoVim / DinoMambaReg '
                             f'weights, got a {type(module).__name__}: give it '
                             "init_cfg=dict(type='Pretrained', ...) instead")
        super().__call__(module)

    def _get_init_info(self) -> str:
        return f'{self.__class__.__name__}: load {self.network} from {self.checkpoint}'


def checked_pretrained_cfg(init_cfg: InitCfg) -> InitCfg:
    """``init_cfg`` with every ``type='Pretrained'`` entry built from the ``dinomamba_mm`` scope
    (:class:`CheckedPretrainedInit`); mmengine still recognises the entries as pretrained and
    applies them last."""
    if init_cfg is None:
        return None
    cfgs = copy.deepcopy(init_cfg)
    for cfg in ([cfgs] if isinstance(cfgs, dict) else cfgs):
        if isinstance(cfg, dict) and cfg.get('type') == 'Pretrained':
            cfg.setdefault('_scope_', SCOPE)
    return cfgs
