"""Token-mixing matrices M (Y = M X) of a backbone's blocks, through the mixers' one interface.

Every token mixer gives its matrices with ``mixing_matrix(x, rows=None)``
(:mod:`dinomamba_mm.models.layers.token_mixer`): softmax attention ('softmax', mmpretrain's
``MultiheadAttention``, by registration), linear attention ('linear', phi(Q) phi(K)^T, the
unnormalised matrix LinearViT applies to V) and the bidirectional Mamba-2 mixer ('forward',
'backward' and 'combined', the SSD matrix of each scan and their average). This module finds
the mixer of a block, records its input during a backbone forward and asks it for M; it knows
no mixer class.

All matrices are (B, H, rows, L) float32; ``rows`` selects query positions (default: all).
"""
from contextlib import contextmanager
from typing import Dict, Iterator, Optional, Sequence

import torch
import torch.nn as nn

from dinomamba_mm.argument_checks import check_indices
from dinomamba_mm.models.layers import mixing_matrix_of


def mixer_mixing_matrices(mixer: nn.Module, x: torch.Tensor,
                          rows: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
    """The mixing matrices of a token mixer for its input x (B, L, D), without autograd.

    Returns:
        OrderedDict name -> (B, H, R, L) float32, as the mixer's ``mixing_matrix`` gives it.
    """
    mixing_matrix = mixing_matrix_of(mixer)
    if mixing_matrix is None:
        raise TypeError(f'{type(mixer).__name__} is no token mixer: it has no mixing_matrix '
                        'method and none is registered for its class (register_mixing_matrix)')
    with torch.no_grad():
        return mixing_matrix(x, rows)


def find_mixer(block: nn.Module) -> nn.Module:
    """The token mixer inside a backbone block: its first module with a mixing matrix."""
    for module in block.modules():
        if mixing_matrix_of(module) is not None:
            return module
    raise TypeError(f'{type(block).__name__} holds no token mixer (no module with a '
                    'mixing_matrix method or a registered one)')


def backbone_blocks(backbone: nn.Module) -> nn.ModuleList:
    """The backbone's sequence of blocks (``backbone.layers``)."""
    blocks = getattr(backbone, 'layers', None)
    if not isinstance(blocks, nn.ModuleList):
        raise TypeError(f'{type(backbone).__name__} has no ModuleList `layers` of blocks')
    return blocks


def normalize_layer_indices(layer_indices: Sequence[int], num_layers: int) -> list:
    """Sorted non-negative block indices; negative ones count from the end (check_indices
    refuses none, repeats and indices out of range)."""
    return sorted(check_indices('layer_indices', layer_indices, num_layers))


@contextmanager
def capture_mixer_inputs(backbone: nn.Module,
                         layer_indices: Sequence[int]) -> Iterator[Dict[int, torch.Tensor]]:
    """Record the input (B, L, D) of the mixers of chosen blocks during a backbone forward.

    Yields a dict filled by forward pre-hooks: {block index: mixer input} (no block hooked for
    empty ``layer_indices``); the hooks are removed
    on exit. Also records the patch grid under the key 'grid' when the backbone has a
    ``patch_embed`` returning (tokens, (h, w)) as mmcv's ``PatchEmbed`` does.
    """
    blocks = backbone_blocks(backbone)
    captured: Dict = {}
    handles = []

    def keep_input(index):
        def hook(module, args):
            captured[index] = args[0].detach()
        return hook

    wanted = normalize_layer_indices(layer_indices, len(blocks)) if len(layer_indices) else []
    for index in wanted:
        handles.append(find_mixer(blocks[index]).register_forward_pre_hook(keep_input(index)))
    patch_embed = getattr(backbone, 'patch_embed', None)
    if patch_embed is not None:
        def keep_grid(module, args, output):
            if isinstance(output, tuple) and len(output) == 2:
                captured['grid'] = tuple(int(s) for s in output[1])
        handles.append(patch_embed.register_forward_hook(keep_grid))
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()
