"""The token layout and position-embedding grid of backbones, kept in checkpoint meta.

Two settings of a DinoVim / DinoMambaReg decide its features without showing in its state dict:
``token_layout`` ('paper' or 'interleaved') and the patch grid its position-embedding table is
stored for (``img_size / patch_size``). Every checkpoint this package writes or converts records
them in ``meta['backbone_layouts']``::

    {'teacher.backbone': {'type': 'DinoMambaReg', 'token_layout': 'paper',
                          'pos_embed_grid': [7, 7]}, 'backbone': {...}}

keyed by the backbone's module path in the state dict ('' for a bare backbone state dict). The
paper's raw files (and bare state dicts in its key names) carry no meta; they are known to be
'paper', with the grid of their table. Loading checks the record against each module with a
``token_layout`` attribute that it fills: another token layout is an error naming both; another
grid is resampled once at load, with a warning (``DinoVim``'s load hook).
"""
import logging
import math
from collections import OrderedDict
from typing import Dict, Mapping

import torch.nn as nn
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper

from .files import CheckpointError

LAYOUT_META_KEY = 'backbone_layouts'
#: where a state dict records the (h, w) patch grid of a backbone's ``pos_embed``: that module's
#: entry of the state dict's ``_metadata`` (kept by torch.save; written by DinoVim and LinearViT,
#: and by :func:`hand_recorded_grids` from the record in a checkpoint's meta)
GRID_METADATA_KEY = 'pos_embed_grid'


def model_layouts(model: nn.Module) -> Dict[str, dict]:
    """``{module path: record}`` of every module of ``model`` with a ``token_layout`` (a model
    wrapper is unwrapped): its type, token layout and stored patch grid."""
    if is_model_wrapper(model):
        model = model.module
    return {name: dict(type=type(module).__name__, token_layout=module.token_layout,
                       pos_embed_grid=list(module.patch_resolution))
            for name, module in model.named_modules() if hasattr(module, 'token_layout')}


def paper_layout(state_dict: Mapping, name: str) -> dict:
    """The record of a paper backbone, from its state dict in our key names: the paper's tables
    are square (Vim's 14 x 14, MambaR's 7 x 7).

    Raises:
        CheckpointError: naming ``name``, when the table's patch rows are no square.
    """
    registers = state_dict.get('register_tokens')
    num_extra = 1 if registers is None else registers.shape[1]
    table = state_dict['pos_embed']
    patches = table.shape[1] - num_extra
    side = math.isqrt(max(patches, 0))
    if side * side != patches:
        raise CheckpointError(f'{name} holds a paper table (pos_embed of shape '
                              f'{tuple(table.shape)}) whose {patches} patch rows are not a square '
                              "grid; the paper's tables are square (Vim's 14 x 14, MambaR's 7 x 7)")
    return dict(type='DinoVim' if registers is None else 'DinoMambaReg', token_layout='paper',
                pos_embed_grid=[side, side])


def hand_recorded_grids(module: nn.Module, state_dict: Mapping, records: Mapping[str, dict],
                        module_path: str) -> None:
    """Put each record's position-embedding grid into ``state_dict``'s ``_metadata`` at the
    path of the module it is for, where that module's load pre-hook reads it (a grid the state
    dict records itself is kept).

    Args:
        module: the module ``state_dict`` is loaded into.
        state_dict: its weights (an OrderedDict; its ``_metadata`` is created if missing).
        records: ``{module path in the checkpoint: record}``.
        module_path: where ``module``'s weights sit in the checkpoint.
    """
    metadata = getattr(state_dict, '_metadata', None)
    metadata = OrderedDict() if metadata is None else metadata
    for path in model_layouts(module):
        record = records.get('.'.join(p for p in (module_path, path) if p)) or {}
        if record.get('pos_embed_grid'):
            entry = dict(metadata.get(path, {}))
            entry.setdefault(GRID_METADATA_KEY, list(record['pos_embed_grid']))
            metadata[path] = entry
    state_dict._metadata = metadata


def check_layouts(module: nn.Module, records: Mapping[str, dict], module_path: str,
                  state_dict: Mapping, name: str) -> None:
    """Raise a :class:`CheckpointError` when a record names another token layout than the
    module it is loaded into.

    Args:
        module: the module ``state_dict`` is loaded into.
        records: ``{module path: record}`` of the checkpoint.
        module_path: where ``module``'s weights sit in the checkpoint ('' for its top level).
        state_dict: the weights loaded into ``module``; submodules it holds no key of (a linear
            head only) are not checked.
        name: how the error names the checkpoint.

    No record (a checkpoint written before records existed, or by another code base) is logged
    as a warning.
    """
    for path, target in model_layouts(module).items():
        if path and not any(key.startswith(f'{path}.') for key in state_dict):
            continue
        where = '.'.join(p for p in (module_path, path) if p)
        record = records.get(where)
        where = where or 'its top level'
        if record is None:
            print_log(f'{name} records no token layout for {where}; loading it as '
                      f'token_layout={target["token_layout"]!r} unchecked', logger='current',
                      level=logging.WARNING)
        elif record.get('token_layout') != target['token_layout']:
            raise CheckpointError(
                f'{name} holds a {record.get("type", "DinoVim")} with '
                f'token_layout={record.get("token_layout")!r} (position-embedding grid '
                f'{record.get("pos_embed_grid")}) at {where}, but the {target["type"]} it is '
                f'loaded into has token_layout={target["token_layout"]!r} (grid '
                f'{target["pos_embed_grid"]}): its features would be wrong. Build the backbone '
                f'with token_layout={record.get("token_layout")!r}'
                f'{_grid_advice(module.get_submodule(path), record, target)}.')


def _grid_advice(backbone: nn.Module, record: Mapping, target: Mapping) -> str:
    """' and img_size=...' when the record's grid is not the target's, else ''."""
    grid = record.get('pos_embed_grid')
    if not grid or list(grid) == list(target['pos_embed_grid']):
        return ''
    patch = backbone.patch_size
    size = grid[0] * patch if grid[0] == grid[1] else (grid[0] * patch, grid[1] * patch)
    return f' and img_size={size} (its {grid[0]} x {grid[1]} grid of {patch} px patches)'
