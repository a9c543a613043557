"""Where the class token (or registers) and the patches sit in a backbone's token sequence."""
from typing import NamedTuple, Tuple

import torch
import torch.nn as nn


class TokenLayout(NamedTuple):
    """Positions in the sequence of one backbone for one patch grid.

    Attributes:
        read (torch.Tensor): Positions of the tokens whose maps are wanted, shape (E,): the
            class token, or the registers of a register model.
        patches (torch.Tensor): Positions of the patch tokens in raster order, shape (h * w,).
        grid (Tuple[int, int]): The patch grid (h, w).
    """
    read: torch.Tensor
    patches: torch.Tensor
    grid: Tuple[int, int]


def token_layout(backbone: nn.Module, grid: Tuple[int, int]) -> TokenLayout:
    """Token layout of ``backbone`` for a patch grid (h, w).

    Supported: backbones with a ``token_plan(grid)`` method returning 'read' and 'patches'
    (DinoVim / DinoMambaReg: class token in the middle, registers spread among the patches), and
    mmpretrain's ``VisionTransformer`` and its subclasses such as LinearViT (class token first,
    patches after the ``num_extra_tokens`` leading tokens).
    """
    from mmpretrain.models.backbones import VisionTransformer  # only for ViT-style backbones

    grid = (int(grid[0]), int(grid[1]))
    num_patches = grid[0] * grid[1]
    if hasattr(backbone, 'token_plan'):
        plan = backbone.token_plan(grid)
        return TokenLayout(plan['read'].cpu(), plan['patches'].cpu(), grid)
    if isinstance(backbone, VisionTransformer):
        if getattr(backbone, 'cls_token', None) is None:
            raise ValueError(f'{type(backbone).__name__} was built with with_cls_token=False: '
                             'it has no class token to take maps from')
        extra = backbone.num_extra_tokens
        return TokenLayout(torch.tensor([0]), torch.arange(extra, extra + num_patches), grid)
    raise TypeError(f'token_layout does not know the token order of {type(backbone).__name__}; '
                    'supported: backbones with token_plan(grid) (DinoVim) and mmpretrain '
                    'VisionTransformer subclasses')
