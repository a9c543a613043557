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
from typing import Dict, Mapping

import torch.nn as nn
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper

from .files import CheckpointError

LAYOUT_META_KEY = 'backbone_layouts'


def model_layouts(model: nn.Module) -> Dict[str, dict]:
    """``{module path: record}`` of every module of ``model`` with a ``token_layout`` (a model
    wrapper is unwrapped): its type, token layout and stored patch grid."""
    if is_model_wrapper(model):
        model = model.module
    return {name: dict(type=type(module).__name__, token_layout=module.token_layout,
                       pos_embed_grid=list(module.patch_resolution))
            for name, module in model.named_modules() if hasattr(module, 'token_layout')}


def paper_layout(state_dict: Mapping) -> dict:
    """The record of a paper backbone, from its state dict in our key names."""
    registers = state_dict.get('register_tokens')
    num_extra = 1 if registers is None else registers.shape[1]
    side = math.isqrt(state_dict['pos_embed'].shape[1] - num_extra)
    return dict(type='DinoVim' if registers is None else 'DinoMambaReg', token_layout='paper',
                pos_embed_grid=[side, side])


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
