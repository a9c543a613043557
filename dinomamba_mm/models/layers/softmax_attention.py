"""Softmax attention as a token mixer: mmpretrain's ``MultiheadAttention``, registered, not copied."""
from collections import OrderedDict
from typing import Dict, Tuple

import torch
from mmpretrain.models.utils import MultiheadAttention

from dinomamba_mm.registry import MODELS
from .token_mixer import Rows, depth_scaled_init_, register_mixing_matrix


@register_mixing_matrix(MultiheadAttention)
def softmax_attention_matrix(attention: MultiheadAttention, x: torch.Tensor,
                             rows: Rows = None) -> Dict[str, torch.Tensor]:
    """{'softmax': softmax(Q K^T / sqrt(d)) (B, H, R, L) float32} of mmpretrain's attention for
    its input x (B, L, D): the matrix its forward applies to V (``v_shortcut``'s added V is not
    part of it). mmpretrain scales by head_dims ** -0.5 whatever ``qk_scale`` says, and so does
    this."""
    batch, length, _ = x.shape
    qkv = attention.qkv(x).reshape(batch, length, 3, attention.num_heads, attention.head_dims)
    q, k, _ = qkv.permute(2, 0, 3, 1, 4)
    if rows is not None:
        q = q[:, :, rows]
    scores = (q.float() @ k.float().transpose(-2, -1)) * attention.head_dims**-0.5
    return OrderedDict(softmax=torch.softmax(scores, dim=-1))


@MODELS.register_module()
class SoftmaxAttention(MultiheadAttention):
    """mmpretrain's ``MultiheadAttention`` as a registered token mixer, e.g. DinoVim's
    ``mixer_cfg=dict(type='dinomamba_mm.SoftmaxAttention', num_heads=4)``.

    Its arguments, parameters (and their names) and forward are mmpretrain's; it adds the
    token-mixer interface (:mod:`.token_mixer`). The ``MultiheadAttention`` layers that
    mmpretrain's ``VisionTransformer`` builds itself have the same :func:`mixing_matrix
    <softmax_attention_matrix>` by registration.

    Shapes: x (B, L, embed_dims) -> (B, L, embed_dims).
    """

    def mixing_matrix(self, x: torch.Tensor, rows: Rows = None) -> Dict[str, torch.Tensor]:
        """{'softmax': (B, H, R, L) float32} for the input x (B, L, D)."""
        return softmax_attention_matrix(self, x, rows)

    def init_residual_output(self, num_layers: int) -> None:
        """Depth-scaled initialisation of the output projection ``proj``."""
        depth_scaled_init_(self.proj, num_layers)

    def activation_elements(self, length: int) -> Tuple[int, int]:
        """A lower bound of (working, kept) elements per sample for ``length`` tokens: Q, K, V
        and the attended values, which the backward pass keeps too (the L x L matrix is not
        counted: torch's fused attention kernels do not form it)."""
        elements = 4 * length * self.embed_dims
        return elements, elements
