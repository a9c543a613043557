"""An absolute position embedding's patch grid: recorded with a state dict, read back when one
is loaded, and resized to another grid."""
import math
from typing import Mapping, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from dinomamba_mm.argument_checks import check_choice
from dinomamba_mm.checkpoints.layout import GRID_METADATA_KEY

RESIZE_CONVENTIONS = ('size', 'dino')
#: modes of ``F.interpolate`` on a 2-D grid
INTERPOLATE_MODES = ('nearest', 'bilinear', 'bicubic', 'area', 'nearest-exact')


def record_pos_embed_grid(module: nn.Module, state_dict: Mapping, prefix: str,
                          local_metadata: dict) -> None:
    """State-dict hook of a backbone with a ``patch_resolution``: record that grid."""
    local_metadata[GRID_METADATA_KEY] = list(module.patch_resolution)


def loaded_pos_embed_grid(table: torch.Tensor, num_extra_tokens: int,
                          local_metadata: Optional[Mapping], name: str) -> Tuple[int, int]:
    """The (h, w) patch grid of a loaded position-embedding table (1, E + h*w, C): the one its
    state dict records (:func:`record_pos_embed_grid`; the loaders of
    :mod:`dinomamba_mm.checkpoints` add that of a checkpoint's ``meta['backbone_layouts']``),
    else a square when its patch rows are a square number.

    Raises:
        ValueError: the recorded grid does not fit the table, or none is recorded and the rows
            are no square.
    """
    patches = table.shape[1] - num_extra_tokens if table.dim() == 3 else -1
    recorded = (local_metadata or {}).get(GRID_METADATA_KEY)
    if recorded is not None:
        height, width = recorded
        if height * width != patches:
            raise ValueError(f'{name}: the state dict records a {height} x {width} patch grid, '
                             f'but its table of shape {tuple(table.shape)} holds {patches} '
                             f'patch rows (after {num_extra_tokens} extra tokens)')
        return int(height), int(width)
    side = math.isqrt(max(patches, 0))
    if side * side != patches:
        raise ValueError(
            f'{name} of shape {tuple(table.shape)} records no patch grid, and its {patches} '
            f'patch rows (after {num_extra_tokens} extra tokens) are not a square grid: load '
            'it from a checkpoint that records the grid (the state dict of a DinoVim or '
            "LinearViT, or meta['backbone_layouts'], through dinomamba_mm.checkpoints)")
    return side, side


def resize_pos_embed(pos_embed: torch.Tensor,
                     src_hw: Tuple[int, int],
                     dst_hw: Tuple[int, int],
                     num_extra_tokens: int,
                     mode: str = 'bicubic',
                     convention: str = 'size') -> torch.Tensor:
    """Interpolate the patch part of a position embedding to a new (h, w) grid.

    Layout (mmpretrain's): ``pos_embed`` is (1, E + h*w, C), the E extra-token embeddings first,
    then the patch embeddings in raster order. The extra-token rows are kept as they are.

    Args:
        pos_embed: (1, E + src_h * src_w, C).
        src_hw: grid (src_h, src_w) the patch rows were trained for.
        dst_hw: target grid (dst_h, dst_w).
        num_extra_tokens: E.
        mode: ``F.interpolate`` mode ('bicubic', 'bilinear', 'nearest', ...).
        convention: 'size' interpolates to ``size=dst_hw`` with ``align_corners=False``, as
            mmpretrain's ``resize_pos_embed`` does (equal outputs: test_pos_embed.py; not
            imported from there, since that imports mmpretrain.models, and with it mmdet, into
            mmseg runs); 'dino' passes ``scale_factor=((dst_h + 0.1) / src_h,
            (dst_w + 0.1) / src_w)`` as DINO's and the Dino-Mamba paper code's
            ``interpolate_pos_encoding`` do, which samples at slightly different points.

    Returns:
        (1, E + dst_h * dst_w, C) in ``pos_embed``'s dtype (interpolation runs in float32).
    """
    check_choice('convention', convention, RESIZE_CONVENTIONS)
    check_choice('mode', mode, INTERPOLATE_MODES)
    src_h, src_w = src_hw
    dst_h, dst_w = dst_hw
    if pos_embed.dim() != 3 or pos_embed.shape[0] != 1 or \
            pos_embed.shape[1] != num_extra_tokens + src_h * src_w:
        raise ValueError(f'pos_embed must have shape (1, {num_extra_tokens} + {src_h}*{src_w}, C) '
                         f'for num_extra_tokens={num_extra_tokens} and grid {tuple(src_hw)}, '
                         f'got {tuple(pos_embed.shape)}')
    if (src_h, src_w) == (dst_h, dst_w):
        return pos_embed
    channels = pos_embed.shape[2]
    extra = pos_embed[:, :num_extra_tokens]
    grid = pos_embed[:, num_extra_tokens:].reshape(1, src_h, src_w, channels)
    grid = grid.permute(0, 3, 1, 2).float()
    if convention == 'size':
        align = False if mode in ('linear', 'bilinear', 'bicubic', 'trilinear') else None
        grid = F.interpolate(grid, size=(dst_h, dst_w), mode=mode, align_corners=align)
    else:
        scale = ((dst_h + 0.1) / src_h, (dst_w + 0.1) / src_w)
        grid = F.interpolate(grid, scale_factor=scale, mode=mode)
        if tuple(grid.shape[-2:]) != (dst_h, dst_w):
            raise RuntimeError(f'dino-convention resize gave grid {tuple(grid.shape[-2:])}, '
                               f'expected {(dst_h, dst_w)}')
    grid = grid.flatten(2).transpose(1, 2).to(pos_embed.dtype)
    return torch.cat((extra, grid), dim=1)
