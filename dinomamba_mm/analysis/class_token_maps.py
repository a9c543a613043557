"""Maps of the class token over the patch grid, at any block of any of the three backbones.

Two kinds of map (the Binary-AUC inputs of the paper):

- ``'similarity'``: cosine similarity of the class token's output to every patch output of a
  block (the block outputs the backbone returns with ``out_type='raw'``);
- ``'attention'``: the class token's row of the block's mixing matrix M per head, as the mixer
  gives it (softmax attention for ViT, phi(q) phi(K)^T for LinearViT, the SSD matrix per
  direction for DinoVim; see :mod:`.mixing_matrix`), restricted to the patch columns. A map's
  scale is the mixer's (Binary-AUC is the same for any positive scale of a map).

For register models (several read tokens) ``query='mean'`` averages over the registers (their
mean output / the mean of their rows) and ``query='each'`` keeps one map per register.
"""
from collections import OrderedDict
from contextlib import contextmanager
from typing import Dict, Iterator, List, NamedTuple, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from dinomamba_mm.argument_checks import check_argument, check_choice
from .mixing_matrix import (backbone_blocks, capture_mixer_inputs, find_mixer,
                            mixer_mixing_matrices, normalize_layer_indices)
from .token_layout import TokenLayout, token_layout

MAP_TYPES = ('similarity', 'attention')
QUERY_MODES = ('mean', 'each')


class ClassTokenMaps(NamedTuple):
    """Maps of a batch: ``maps`` (B, num_layers, K, h, w) float32 over the patch grid, with
    ``layer_ids`` (num_layers block indices), ``names`` (K labels: 'cls', 'head3',
    'forward_head0', 'tok98_head1', ...) and the patch ``grid`` (h, w)."""
    maps: torch.Tensor
    layer_ids: List[int]
    names: List[str]
    grid: Tuple[int, int]


def class_token_similarity(tokens: torch.Tensor, layout: TokenLayout,
                           query: str = 'mean') -> torch.Tensor:
    """Cosine similarity of the read token(s) to each patch.

    Args:
        tokens: (B, L, C) block outputs in sequence order.
        layout: positions of the read tokens and patches.
        query: 'mean' (one map of the mean read token) or 'each' (one map per read token).

    Returns:
        (B, E', h, w) with E' = 1 for 'mean', else the number of read tokens.
    """
    check_choice('query', query, QUERY_MODES)
    tokens = tokens.float()
    read = tokens[:, layout.read.to(tokens.device)]
    if query == 'mean':
        read = read.mean(dim=1, keepdim=True)
    patches = tokens[:, layout.patches.to(tokens.device)]
    sims = F.normalize(read, dim=-1) @ F.normalize(patches, dim=-1).transpose(1, 2)
    return sims.reshape(tokens.shape[0], read.shape[1], *layout.grid)


def class_token_attention(rows: torch.Tensor, layout: TokenLayout,
                          query: str = 'mean') -> torch.Tensor:
    """Patch part of the read tokens' rows of a mixing matrix.

    Args:
        rows: (B, H, E, L): the rows of M at ``layout.read``.
        layout: token layout of the sequence.
        query: 'mean' averages the E rows, 'each' keeps them.

    Returns:
        (B, E' * H, h, w), read-token major.
    """
    check_choice('query', query, QUERY_MODES)
    if query == 'mean':
        rows = rows.mean(dim=2, keepdim=True)
    patches = rows[..., layout.patches.to(rows.device)]  # (B, H, E', h*w)
    batch, heads, num_read = patches.shape[:3]
    return patches.transpose(1, 2).reshape(batch, num_read * heads, *layout.grid)


@contextmanager
def raw_block_outputs(backbone: nn.Module, layer_ids: Sequence[int]) -> Iterator[None]:
    """Make a backbone with mmpretrain's ``out_type`` / ``out_indices`` attributes return the
    raw tokens (B, L, C) of the blocks ``layer_ids`` for the duration of the context."""
    if not hasattr(backbone, 'out_type') or not hasattr(backbone, 'out_indices'):
        raise TypeError(f'{type(backbone).__name__} has no out_type / out_indices attributes; '
                        "similarity maps need a backbone that can return 'raw' block tokens")
    saved = backbone.out_type, backbone.out_indices
    backbone.out_type, backbone.out_indices = 'raw', list(layer_ids)
    try:
        yield
    finally:
        backbone.out_type, backbone.out_indices = saved


def _names(num_read: int, read_positions: List[int], kinds: List[str],
           num_heads: int) -> List[str]:
    names = []
    for e in range(num_read):
        for kind in kinds:
            for head in range(num_heads):
                parts = [f'tok{read_positions[e]}'] if num_read > 1 else []
                parts += [kind] if len(kinds) > 1 else []
                parts.append(f'head{head}')
                names.append('_'.join(parts))
    return names


def select_matrices(matrices: Dict[str, torch.Tensor],
                    names: Sequence[str]) -> Dict[str, torch.Tensor]:
    """The matrices ``names`` of a mixer that gives several (Mamba-2: 'forward', 'backward',
    'combined'), in that order; the one matrix of a mixer that gives one (attention)."""
    if len(matrices) == 1:
        return matrices
    missing = [name for name in names if name not in matrices]
    if missing:
        raise ValueError(f'mamba_kinds {list(names)} must be drawn from the mixer\'s matrices '
                         f'{list(matrices)}; not there: {missing}')
    return OrderedDict((name, matrices[name]) for name in names)


@torch.no_grad()
def extract_class_token_maps(backbone: nn.Module,
                             inputs: torch.Tensor,
                             layer_indices: Sequence[int] = (-1, ),
                             map_type: str = 'similarity',
                             query: str = 'mean',
                             mamba_kinds: Sequence[str] = ('combined', )) -> ClassTokenMaps:
    """Class-token maps of chosen blocks for a batch of images.

    Args:
        backbone: mmpretrain VisionTransformer, LinearViT, DinoVim or DinoMambaReg.
        inputs: (B, 3, H, W) preprocessed images.
        layer_indices: blocks to read (negative counts from the end).
        map_type: 'similarity' or 'attention' (see the module docstring).
        query: 'mean' or 'each' over the read tokens (class token / registers).
        mamba_kinds: which of the matrices to map of a mixer that gives several (the Mamba-2
            mixer: 'forward', 'backward', 'combined'); a mixer with one matrix maps it.

    Returns:
        :class:`ClassTokenMaps`; K = E' (similarity) or E' * kinds * heads (attention).
    """
    check_choice('map_type', map_type, MAP_TYPES)
    check_choice('query', query, QUERY_MODES)
    check_argument('mamba_kinds', mamba_kinds, 'a non-empty sequence of matrix names (str)',
                   lambda v: isinstance(v, (tuple, list)) and all(isinstance(k, str) for k in v),
                   lambda v: len(v) > 0)
    layer_ids = normalize_layer_indices(layer_indices, len(backbone_blocks(backbone)))
    hooked = layer_ids if map_type == 'attention' else []
    with capture_mixer_inputs(backbone, hooked) as captured, \
            raw_block_outputs(backbone, layer_ids):
        outputs = backbone(inputs)
    if 'grid' not in captured:
        raise TypeError(f'{type(backbone).__name__}.patch_embed did not report its patch grid')
    layout = token_layout(backbone, captured['grid'])
    read_positions = layout.read.tolist()
    num_read = 1 if query == 'mean' else len(read_positions)
    maps, names = [], None
    for position, layer in enumerate(layer_ids):
        if map_type == 'similarity':
            maps.append(class_token_similarity(outputs[position], layout, query))
            if len(read_positions) == 1:
                names = ['cls']
            else:
                names = ['mean'] if query == 'mean' else [f'tok{p}' for p in read_positions]
            continue
        mixer = find_mixer(backbone_blocks(backbone)[layer])
        matrices = select_matrices(mixer_mixing_matrices(mixer, captured[layer], layout.read),
                                   mamba_kinds)
        per_kind = [class_token_attention(rows, layout, query) for rows in matrices.values()]
        num_heads = next(iter(matrices.values())).shape[1]
        # (B, E' * H) per kind -> (B, E' * kinds * H), read-token major
        stacked = torch.stack([m.unflatten(1, (num_read, num_heads)) for m in per_kind], dim=2)
        maps.append(stacked.flatten(1, 3))
        names = _names(num_read, read_positions, list(matrices), num_heads)
    return ClassTokenMaps(torch.stack(maps, dim=1), layer_ids, names, layout.grid)
