"""The token layout and position-embedding grid of DinoVim backbones, kept in checkpoint meta.

Two settings of a DinoVim / DinoMambaReg decide its features without showing in its state dict:
``token_layout`` ('paper' or 'interleaved') and the patch grid its position-embedding table is
stored for (``img_size / patch_size``). Every checkpoint this package writes or converts records
them in ``meta['backbone_layouts']``::

    {'teacher.backbone': {'type': 'DinoMambaReg', 'token_layout': 'paper',
                          'pos_embed_grid': [7, 7]}, 'backbone': {...}}

keyed by the backbone's module path in the state dict ('' for a bare backbone state dict). The
paper's raw files (and bare state dicts in its key names) carry no meta; they are known to be
'paper', with the grid of their table. Loading checks the record against the backbone it fills:
another token layout is an error naming both; another grid is resampled once at load, with a
warning (``DinoVim``'s load hook).
"""
import logging
import math
from typing import Dict, Mapping, Optional

import torch.nn as nn
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper

from .checkpoint_mapping import is_paper_layout, is_raw_paper_checkpoint
from .dinovim import DinoVim

LAYOUT_META_KEY = 'backbone_layouts'


def backbone_layout(backbone: DinoVim) -> dict:
    """The record of one backbone: its type, token layout and stored patch grid."""
    return dict(type=type(backbone).__name__, token_layout=backbone.token_layout,
                pos_embed_grid=list(backbone.patch_resolution))


def model_layouts(model: nn.Module) -> Dict[str, dict]:
    """``{module path: record}`` of every DinoVim in ``model`` (a model wrapper is unwrapped)."""
    if is_model_wrapper(model):
        model = model.module
    return {name: backbone_layout(module) for name, module in model.named_modules()
            if isinstance(module, DinoVim)}


def paper_layout(state_dict: Mapping) -> dict:
    """The record of a paper backbone, from its state dict in our key names."""
    registers = state_dict.get('register_tokens')
    num_extra = 1 if registers is None else registers.shape[1]
    side = math.isqrt(state_dict['pos_embed'].shape[1] - num_extra)
    return dict(type='DinoVim' if registers is None else 'DinoMambaReg', token_layout='paper',
                pos_embed_grid=[side, side])


def checkpoint_layout(checkpoint: Mapping, module_path: str,
                      state_dict: Optional[Mapping] = None) -> Optional[dict]:
    """The record of the backbone at ``module_path`` of a loaded checkpoint, None if unrecorded.

    Args:
        checkpoint: what ``torch.load`` returned.
        module_path: the backbone's key prefix without its final dot ('' for none).
        state_dict: the backbone's weights taken from it in our key names; needed to recognise
            the paper's files ('paper' with the grid of their table).
    """
    raw = is_raw_paper_checkpoint(checkpoint)
    original = checkpoint.get('state_dict', checkpoint) if not raw else {}
    paper = raw or is_paper_layout(original)
    if paper and state_dict is not None and 'pos_embed' in state_dict:
        return paper_layout(state_dict)
    meta = checkpoint.get('meta')
    records = meta.get(LAYOUT_META_KEY) if isinstance(meta, Mapping) else None
    if not isinstance(records, Mapping):
        return None
    return records.get(module_path)


def check_layout(backbone: nn.Module, record: Optional[dict], source: str,
                 module_path: str = 'backbone') -> None:
    """Raise a ValueError when ``record`` names another token layout than ``backbone`` has.

    No record (a checkpoint written before records existed, or by another code base) is logged
    as a warning; backbones other than DinoVim have no layout and pass.
    """
    if not isinstance(backbone, DinoVim):
        return
    if record is None:
        print_log(f'{source} records no token layout for {module_path or "its backbone"}; '
                  f'loading it as token_layout={backbone.token_layout!r} unchecked',
                  logger='current', level=logging.WARNING)
        return
    if record.get('token_layout') != backbone.token_layout:
        raise ValueError(
            f'{source} holds a {record.get("type", "DinoVim")} with '
            f'token_layout={record.get("token_layout")!r} (position-embedding grid '
            f'{record.get("pos_embed_grid")}) at {module_path or "its top level"}, but the '
            f'backbone it is loaded into has token_layout={backbone.token_layout!r} (grid '
            f'{list(backbone.patch_resolution)}): its features would be wrong. Build the '
            f'backbone with token_layout={record.get("token_layout")!r}.')
