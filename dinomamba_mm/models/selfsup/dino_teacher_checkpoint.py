"""Find the teacher backbone's weights in a DINO checkpoint (the network DINO evaluates).

Layouts understood, tried in this order:

1. the DINO reference code's (and the Dino-Mamba paper's released) checkpoints: a dict with a
   ``'teacher'`` state dict whose backbone keys start with ``backbone.`` (``module.backbone.`` when
   it was saved from DistributedDataParallel);
2. an mmengine checkpoint of :class:`DINO` (``state_dict`` keys ``teacher.backbone.*``; the
   student's ``backbone.*`` keys are ignored);
3. a backbone-only mmengine checkpoint (``state_dict`` keys ``backbone.*``, as written by
   ``tools/misc/extract_dino_teacher.py``) when it holds no ``teacher.*`` key.

An explicit ``prefix`` skips the detection: ``'teacher.backbone.'``, ``'backbone.'``, or ``''`` for
a plain backbone state dict.

Backbone weights in the Dino-Mamba paper's key layout (``patch_embed.proj.*``, MambaR's
``pos_embed_cls``) are renamed to DinoVim / DinoMambaReg keys through the backbone's
:mod:`~dinomamba_mm.models.backbones.checkpoint_mapping` (the backbone then needs
``token_layout='paper'``, and MambaR ``img_size=112``, to give the paper's features;
:func:`teacher_backbone_layout` tells what a checkpoint records).
"""
from collections import OrderedDict
from typing import Dict, Mapping, Optional

import torch
from mmengine.logging import print_log
from mmengine.runner.checkpoint import _load_checkpoint

from dinomamba_mm.checkpoints import check_checkpoint_file
from dinomamba_mm.models.backbones.checkpoint_mapping import (is_paper_layout,
                                                              paper_to_ours)
from dinomamba_mm.models.backbones.layout_record import checkpoint_layout

TEACHER_PREFIX = 'teacher.backbone.'
BACKBONE_PREFIX = 'backbone.'


def _with_prefix(state: Mapping[str, torch.Tensor],
                 prefix: str) -> 'OrderedDict[str, torch.Tensor]':
    return OrderedDict((key[len(prefix):], value)
                       for key, value in state.items()
                       if key.startswith(prefix))


def _describe_keys(checkpoint: Mapping, limit: int = 12) -> str:
    described = f'top-level keys {sorted(map(str, checkpoint.keys()))[:limit]}'
    state = checkpoint.get('state_dict')
    if isinstance(state, Mapping):
        described += f", state_dict keys {list(state.keys())[:limit]}"
        if len(state) > limit:
            described += f' ... ({len(state)} in all)'
    return described


def _detected_prefix(state_dict: Mapping) -> str:
    """The teacher backbone's key prefix in an mmengine checkpoint's state dict."""
    teacher = any(key.startswith('teacher.') for key in state_dict)
    return TEACHER_PREFIX if teacher else BACKBONE_PREFIX


def teacher_backbone_state_dict(
        checkpoint: Mapping,
        prefix: Optional[str] = None,
        source: str = '<checkpoint>') -> 'OrderedDict[str, torch.Tensor]':
    """The teacher backbone's state dict (keys as in the backbone module) of a loaded checkpoint.

    Args:
        checkpoint: what ``torch.load`` returned.
        prefix: key prefix of the backbone weights in ``state_dict``; None detects the layout
            (see the module docstring).
        source: name of the checkpoint for error messages (its path).

    Raises:
        ValueError: naming ``source`` and the keys it holds, when no backbone weights are found.
    """
    if not isinstance(checkpoint, Mapping):
        raise TypeError(f'checkpoint {source} holds a '
                        f'{type(checkpoint).__name__}, expected a dict')
    if prefix is None and isinstance(checkpoint.get('teacher'), Mapping):
        teacher = OrderedDict(
            (key[len('module.'):] if key.startswith('module.') else key, value)
            for key, value in checkpoint['teacher'].items())
        state = _with_prefix(teacher, BACKBONE_PREFIX)
        if state:
            return paper_to_ours(state) if is_paper_layout(state) else state
        raise ValueError(
            f"checkpoint {source} has a 'teacher' entry without backbone.* "
            f"keys: {list(checkpoint['teacher'].keys())[:12]}")
    state_dict = checkpoint.get('state_dict', checkpoint)
    if not isinstance(state_dict, Mapping):
        raise ValueError(f'checkpoint {source} has no state dict: '
                         f'{_describe_keys(checkpoint)}')
    if prefix is not None:
        state = _with_prefix(state_dict, prefix)
    elif _detected_prefix(state_dict) == TEACHER_PREFIX:
        state = _with_prefix(state_dict, TEACHER_PREFIX)
        prefix = TEACHER_PREFIX
    else:
        state = _with_prefix(state_dict, BACKBONE_PREFIX)
        prefix = f"'{TEACHER_PREFIX}' or '{BACKBONE_PREFIX}'"
        if state:  # a student or a supervised model loads just as well: say which was taken
            print_log(f'checkpoint {source} has no teacher.* keys; loading its '
                      f'{BACKBONE_PREFIX}* keys as the backbone', logger='current')
    if not state:
        raise ValueError(
            f'checkpoint {source} has no teacher backbone weights (looked for '
            f"a 'teacher' entry or keys starting with {prefix!s}); it has "
            f'{_describe_keys(checkpoint)}')
    return paper_to_ours(state) if is_paper_layout(state) else state


def load_teacher_backbone(filename: str, prefix: Optional[str] = None,
                          map_location: str = 'cpu'
                          ) -> Dict[str, torch.Tensor]:
    """Load a checkpoint file and return its teacher backbone's state dict.

    See :func:`teacher_backbone_state_dict` for ``prefix`` and the layouts.
    """
    check_checkpoint_file(filename)
    checkpoint = _load_checkpoint(filename, map_location=map_location)
    return teacher_backbone_state_dict(checkpoint, prefix, source=filename)


def teacher_backbone_path(checkpoint: Mapping, prefix: Optional[str] = None) -> str:
    """Where :func:`teacher_backbone_state_dict` takes the weights from: the module path of the
    teacher backbone ('teacher.backbone', 'backbone', '' for a plain state dict), or 'teacher'
    for the DINO reference code's (and the paper's) files."""
    if prefix is None and isinstance(checkpoint.get('teacher'), Mapping):
        return 'teacher'
    if prefix is None:
        prefix = _detected_prefix(checkpoint.get('state_dict', checkpoint))
    return prefix.rstrip('.')


def teacher_backbone_layout(checkpoint: Mapping, state: Mapping,
                            prefix: Optional[str] = None) -> Optional[dict]:
    """The recorded token layout of the teacher backbone (see ``layout_record``), or None.

    Args:
        checkpoint: what ``torch.load`` returned.
        state: its teacher backbone's weights, from :func:`teacher_backbone_state_dict`.
        prefix: as given to :func:`teacher_backbone_state_dict`.
    """
    return checkpoint_layout(checkpoint, teacher_backbone_path(checkpoint, prefix), state)
