"""Materialised token-mixing matrices M (Y = M X) of the three mixers, from a block's input.

- softmax attention (mmpretrain ``MultiheadAttention``): M = softmax(Q K^T / sqrt(d)) per head;
- linear attention (``LinearMultiheadAttention`` of LinearViT): M = phi(Q) phi(K)^T per head,
  exactly the (unnormalised) matrix the layer applies to V; rank <= d (head dims);
- Mamba-2 (``BidirectionalMamba2Mixer`` of DinoVim): per head and direction the SSD matrix
  M_ij = C_i^T B_j dt_j exp(sum of dt A between j and i): ``dinomamba_mm.ops.ssd.
  ssd_mixing_matrix`` of the mixer's scan inputs (its ``mixing_matrices`` method); 'forward'
  (lower triangular), 'backward' (upper triangular) and 'combined' = (forward + backward) / 2,
  the average the mixer applies before its (per token) gated norms. The skip term D x and the
  fact that each direction sees its own convolution of x are not part of M.

All matrices are (B, H, rows, L) float32; ``rows`` selects query positions (default: all).
"""
from collections import OrderedDict
from contextlib import contextmanager
from typing import Dict, Iterator, Optional, Sequence

import torch
import torch.nn as nn
from mmpretrain.models.utils import MultiheadAttention

from dinomamba_mm.argument_checks import check_indices
from dinomamba_mm.models.layers import BidirectionalMamba2Mixer, LinearMultiheadAttention

MIXER_TYPES = (LinearMultiheadAttention, MultiheadAttention, BidirectionalMamba2Mixer)
MAMBA_KINDS = ('forward', 'backward', 'combined')


def softmax_attention_matrix(q: torch.Tensor, k: torch.Tensor,
                             scale: Optional[float] = None) -> torch.Tensor:
    """softmax(q k^T * scale) over keys: q (B, H, R, d), k (B, H, L, d) -> (B, H, R, L).

    ``scale`` defaults to d ** -0.5.
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return torch.softmax((q.float() @ k.float().transpose(-2, -1)) * scale, dim=-1)


def linear_attention_matrix(phi_q: torch.Tensor, phi_k: torch.Tensor,
                            normalize: bool = False) -> torch.Tensor:
    """phi(q) phi(k)^T: phi_q (B, H, R, d), phi_k (B, H, L, d) -> (B, H, R, L).

    ``normalize`` divides each row by its sum (rows of non-negative features then sum to 1).
    """
    matrix = phi_q.float() @ phi_k.float().transpose(-2, -1)
    if normalize:
        matrix = matrix / matrix.sum(dim=-1, keepdim=True)
    return matrix


def mamba_mixing_matrices(mixer: BidirectionalMamba2Mixer, x: torch.Tensor,
                          rows: Optional[torch.Tensor] = None,
                          kinds: Sequence[str] = MAMBA_KINDS) -> Dict[str, torch.Tensor]:
    """{'forward' | 'backward' | 'combined': (B, H, R, L)} of a DinoVim mixer, input x (B, L, D)."""
    unknown = [k for k in kinds if k not in MAMBA_KINDS]
    if unknown:
        raise ValueError(f'kinds must be drawn from {MAMBA_KINDS}, got {list(kinds)}')
    forward, backward = mixer.mixing_matrices(x)
    if rows is not None:
        forward, backward = forward[:, :, rows], backward[:, :, rows]
    matrices = dict(forward=forward, backward=backward)
    if 'combined' in kinds:
        matrices['combined'] = (forward + backward) / 2
    return OrderedDict((k, matrices[k]) for k in kinds)


def mixer_mixing_matrices(mixer: nn.Module, x: torch.Tensor,
                          rows: Optional[torch.Tensor] = None,
                          mamba_kinds: Sequence[str] = MAMBA_KINDS,
                          normalize_linear: bool = False) -> Dict[str, torch.Tensor]:
    """Mixing matrices of any supported mixer for its input x (B, L, D).

    Returns:
        OrderedDict kind -> (B, H, R, L): {'softmax': ...} for softmax attention, {'linear': ...}
        for linear attention, ``mamba_kinds`` of {'forward', 'backward', 'combined'} for Mamba-2.
    """
    with torch.no_grad():
        if isinstance(mixer, BidirectionalMamba2Mixer):
            return mamba_mixing_matrices(mixer, x, rows, mamba_kinds)
        if isinstance(mixer, LinearMultiheadAttention):
            phi_q, phi_k = mixer.feature_maps(x)
            phi_q = phi_q if rows is None else phi_q[:, :, rows]
            return OrderedDict(linear=linear_attention_matrix(phi_q, phi_k, normalize_linear))
        if isinstance(mixer, MultiheadAttention):
            batch, length, _ = x.shape
            qkv = mixer.qkv(x).reshape(batch, length, 3, mixer.num_heads, mixer.head_dims)
            q, k, _ = qkv.permute(2, 0, 3, 1, 4)
            q = q if rows is None else q[:, :, rows]
            return OrderedDict(softmax=softmax_attention_matrix(q, k, mixer.head_dims**-0.5))
    raise TypeError(f'no mixing matrix is known for {type(mixer).__name__}; supported: '
                    f'{[t.__name__ for t in MIXER_TYPES]}')


def find_mixer(block: nn.Module) -> nn.Module:
    """The token mixer inside a backbone block (the first supported mixer among its modules)."""
    for module in block.modules():
        if isinstance(module, MIXER_TYPES):
            return module
    raise TypeError(f'{type(block).__name__} holds no supported token mixer '
                    f'({[t.__name__ for t in MIXER_TYPES]})')


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
