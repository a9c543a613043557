"""Find the weights of one module (a backbone, by default the DINO teacher's) in any supported
checkpoint.

Files understood:

1. the DINO reference code's (and the Dino-Mamba paper's released) checkpoints: ``'teacher'`` and
   ``'student'`` state dicts whose backbone keys start with ``backbone.`` (``module.backbone.``
   when saved from DistributedDataParallel);
2. mmengine checkpoints (``{'state_dict': ...}``) and bare state dicts: of :class:`DINO`
   (``teacher.backbone.*`` and the student's ``backbone.*``), of a classifier or segmentor
   (``backbone.*``), backbone-only ones (``backbone.*`` from ``extract_dino_teacher.py`` and the
   converter, or no prefix), a leading ``module.`` (DistributedDataParallel) removed.

Backbone weights in the paper's key names (``patch_embed.proj.*``, MambaR's ``pos_embed_cls``)
are renamed to ours (:mod:`.paper_format`); they are 'paper' token layout (:mod:`.layout`).
"""
import re
from collections import OrderedDict
from typing import Mapping, NamedTuple, Optional

import torch
from mmengine.logging import print_log

from .files import CheckpointError
from .layout import LAYOUT_META_KEY, paper_layout
from .paper_format import is_paper_layout, paper_to_ours

#: tried in order by ``prefix='auto'``: the DINO EMA teacher (what DINO evaluates), then the
#: backbone of a classifier, segmentor or backbone-only file; else the whole state dict.
AUTO_PREFIXES = ('teacher.backbone.', 'backbone.')
NETWORKS = ('teacher', 'student')


class ModuleWeights(NamedTuple):
    """Weights found in a checkpoint.

    Attributes:
        state_dict: keys as in the module.
        module_path: where they sit in the checkpoint ('teacher.backbone', '' for the top
            level; 'teacher' / 'student' in a DINO reference file).
        layouts: the checkpoint's ``{module path: token-layout record}`` (see :mod:`.layout`).
    """
    state_dict: 'OrderedDict[str, torch.Tensor]'
    module_path: str
    layouts: dict

    def as_checkpoint(self, key_prefix: str, **meta) -> dict:
        """A backbone-only checkpoint of these weights: ``{'state_dict': {key_prefix + key:
        tensor}, 'meta': meta}``, their token layout recorded under ``key_prefix`` in
        ``meta[LAYOUT_META_KEY]`` (see :mod:`.layout`) when they have one."""
        meta = dict(meta, key_prefix=key_prefix)
        layout = self.layouts.get(self.module_path)
        if layout is not None:
            meta[LAYOUT_META_KEY] = {key_prefix.rstrip('.'): layout}
        return dict(meta=meta, state_dict=OrderedDict(
            (key_prefix + key, value.detach().clone()) for key, value in self.state_dict.items()))


def _keys(state: Mapping, limit: int = 12) -> str:
    keys = list(state)
    return f'{keys[:limit]}{f" ... ({len(keys)} in all)" if len(keys) > limit else ""}'


def strip_module_prefix(state_dict: Mapping[str, torch.Tensor]) -> OrderedDict:
    """Keys without a leading ``module.`` (a DDP-wrapped model's), as mmengine's loaders do;
    torch's ``_metadata`` (module versions, position-embedding grids) is kept, its module paths
    stripped alike."""
    stripped = OrderedDict((re.sub(r'^module\.', '', key), value)
                           for key, value in state_dict.items())
    metadata = getattr(state_dict, '_metadata', None)
    if metadata is not None:
        stripped._metadata = OrderedDict((re.sub(r'^module(\.|$)', '', path), value)
                                         for path, value in metadata.items())
    return stripped


def check_tensors(state_dict: Mapping, source: str) -> None:
    """Raise a :class:`CheckpointError` naming the entries of ``state_dict`` that are not
    tensors (a list or a number among the weights: the loaders would fail on it)."""
    odd = [f'{key} ({type(value).__name__})' for key, value in state_dict.items()
           if not torch.is_tensor(value)]
    if odd:
        shown = ', '.join(odd[:10]) + (', ...' if len(odd) > 10 else '')
        raise CheckpointError(f'{source}: {len(odd)} entries are not tensors: [{shown}]; '
                              'expected a state dict of tensors')


def _under(state: Mapping, prefix: str) -> 'OrderedDict[str, torch.Tensor]':
    """The entries under ``prefix`` ('a.b.'), keyed from there, with their ``_metadata``."""
    under = OrderedDict((k[len(prefix):], v) for k, v in state.items() if k.startswith(prefix))
    metadata = getattr(state, '_metadata', None)
    if metadata is not None and not prefix:
        under._metadata = OrderedDict(metadata)
    elif metadata is not None:
        path = prefix.rstrip('.')
        under._metadata = OrderedDict(
            (key[len(path) + 1:] if key != path else '', value)
            for key, value in metadata.items() if key == path or key.startswith(prefix))
    return under


def _paper_weights(state: Mapping, module_path: str, name: str) -> ModuleWeights:
    """Weights of a DINO reference file or in the paper's key names: 'paper' token layout."""
    state = paper_to_ours(state) if is_paper_layout(state) else OrderedDict(state)
    layouts = {module_path: paper_layout(state, name)} if 'pos_embed' in state else {}
    return ModuleWeights(state, module_path, layouts)


def find_backbone_weights(checkpoint, name: str, prefix: Optional[str] = 'auto',
                          network: str = 'teacher', teacher_only: bool = False
                          ) -> ModuleWeights:
    """The weights of one module in a loaded checkpoint (see the module docstring).

    Args:
        checkpoint: what ``torch.load`` returned.
        name: how errors name the checkpoint, e.g. ``"checkpoint 'a.pth'"``.
        prefix: key prefix of the module in the state dict: 'auto' (the first of
            :data:`AUTO_PREFIXES` present, else none), None or '' for the whole state dict, or
            one that must be there.
        network: 'teacher' or 'student': which state dict of a DINO reference file.
        teacher_only: with ``prefix='auto'``, refuse weights that are not a DINO teacher's.

    Raises:
        CheckpointError: naming the checkpoint, what was looked for and the keys it holds.
    """
    if network not in NETWORKS:
        raise ValueError(f'network must be one of {NETWORKS}, got {network!r}')
    if prefix is not None and not isinstance(prefix, str):
        raise TypeError(f"prefix must be 'auto', None or a key prefix (str), got {prefix!r}")
    if not isinstance(checkpoint, Mapping):
        raise CheckpointError(f'{name} holds a {type(checkpoint).__name__}, expected a dict')
    if any(isinstance(checkpoint.get(n), Mapping) for n in NETWORKS):
        if not isinstance(checkpoint.get(network), Mapping):
            raise CheckpointError(f'{name} has no {network!r} state dict; its top-level keys '
                                  f'are {sorted(map(str, checkpoint))}')
        entry = strip_module_prefix(checkpoint[network])
        state = _under(entry, 'backbone.')
        if not state:
            raise CheckpointError(f"{name} has a {network!r} entry without backbone.* keys: "
                                  f'{_keys(entry)}')
        check_tensors(state, name)
        return _paper_weights(state, network, name)
    state_dict = checkpoint.get('state_dict', checkpoint)
    if not isinstance(state_dict, Mapping):
        raise CheckpointError(f'{name} has no state dict; its top-level keys are '
                              f'{sorted(map(str, checkpoint))}')
    state_dict = strip_module_prefix(state_dict)
    if prefix == 'auto':
        prefix = next((p for p in AUTO_PREFIXES if any(k.startswith(p) for k in state_dict)),
                      '')
        if prefix == 'backbone.' and any(k.startswith('teacher.') for k in state_dict):
            raise CheckpointError(f'{name} has teacher.* keys but no teacher.backbone.* keys; '
                                  f'its keys: {_keys(state_dict)}')
        if prefix != AUTO_PREFIXES[0] and teacher_only:
            raise CheckpointError(
                f"{name} holds no DINO teacher (no 'teacher' state dict, no teacher.backbone.* "
                f'keys); its keys: {_keys(state_dict)}. A student, a classifier or an extracted '
                'backbone: give its prefix explicitly to take those weights anyway')
        if prefix != AUTO_PREFIXES[0]:
            print_log(f'{name} has no teacher.* keys; loading its {prefix or "top-level"} '
                      'keys as the backbone', logger='current')
    prefix = prefix or ''
    if prefix and not prefix.endswith('.'):
        prefix += '.'
    state = _under(state_dict, prefix)
    if not state:
        heads = sorted({k.split('.')[0] + '.' for k in state_dict})
        raise CheckpointError(f'{name} has no key starting with the prefix {prefix!r}; its keys '
                              f'start with {heads[:10]}')
    check_tensors(state, name)
    module_path = prefix.rstrip('.')
    if is_paper_layout(state):
        return _paper_weights(state, module_path, name)
    meta = checkpoint.get('meta')
    layouts = meta.get(LAYOUT_META_KEY) if isinstance(meta, Mapping) else None
    return ModuleWeights(state, module_path, dict(layouts or {}))
