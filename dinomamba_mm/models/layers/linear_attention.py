"""Linear attention of the paper's LinearViT: softmax(QK^T) replaced by phi(Q) phi(K)^T."""
from collections import OrderedDict
from typing import Dict, Tuple

import torch
from mmpretrain.models.utils import MultiheadAttention

from dinomamba_mm.registry import MODELS
from .token_mixer import Rows, depth_scaled_init_


@MODELS.register_module()
class LinearMultiheadAttention(MultiheadAttention):
    """Multi-head linear attention, a drop-in for mmpretrain's ``MultiheadAttention``.

    For each head, with q_i, k_j, v_j the rows of Q, K, V (L x d, d = head dims),
    ``phi(q) = softmax(q)`` over the d features of one row, and the output is

        out_i = sum_j (phi(q_i) . phi(k_j)) v_j = phi(Q) (phi(K)^T V),

    computed right to left: a (d x d) summary phi(K)^T V per head, then one (L x d)(d x d)
    product, so time and memory grow linearly in the number of tokens L. No 1/sqrt(d) scale
    and no row normalisation: phi(Q) phi(K)^T replaces softmax(Q K^T) as is (non-causal).

    A registered token mixer (:mod:`.token_mixer`): LinearViT's attention, and DinoVim's with
    ``mixer_cfg=dict(type='dinomamba_mm.LinearMultiheadAttention', num_heads=...)``.

    Args:
        *args, **kwargs: those of mmpretrain's ``MultiheadAttention`` (``embed_dims (int)``,
            ``num_heads (int)``, ...); its parameters and their names (``qkv``, ``proj``, layer
            scale) are kept, so ViT checkpoints load. ``attn_drop`` has no matrix to act on
            here and must be 0 (its default); ``v_shortcut`` must be False (its default).

    Shapes: x (B, L, C) -> (B, L, C); :meth:`feature_maps` gives phi(Q), phi(K) per head as
    (B, heads, L, d).
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.attn_drop:
            raise ValueError(f'attn_drop must be 0 for linear attention (no attention matrix '
                             f'is formed), got {self.attn_drop}')
        if self.v_shortcut:
            raise ValueError('v_shortcut is not supported by LinearMultiheadAttention')

    def _qkv(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch, length, _ = x.shape
        qkv = self.qkv(x).reshape(batch, length, 3, self.num_heads, self.head_dims)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        return q, k, v

    def feature_maps(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """phi(Q), phi(K) of input x (B, L, C), each (B, heads, L, head_dims)."""
        q, k, _ = self._qkv(x)
        return q.softmax(dim=-1), k.softmax(dim=-1)

    def mixing_matrix(self, x: torch.Tensor, rows: Rows = None) -> Dict[str, torch.Tensor]:
        """{'linear': phi(Q) phi(K)^T (B, H, R, L) float32} for the input x (B, L, C): the
        matrix the forward applies to V (not row-normalised); its rank is at most head_dims."""
        phi_q, phi_k = self.feature_maps(x)
        if rows is not None:
            phi_q = phi_q[:, :, rows]
        return OrderedDict(linear=phi_q.float() @ phi_k.float().transpose(-2, -1))

    def init_residual_output(self, num_layers: int) -> None:
        """Depth-scaled initialisation of the output projection ``proj``."""
        depth_scaled_init_(self.proj, num_layers)

    def activation_elements(self, length: int) -> Tuple[int, int]:
        """A lower bound of (working, kept) elements per sample for ``length`` tokens: Q, K, V,
        phi(Q), phi(K), the (d x d) summaries and the attended values, all of which the backward
        pass keeps too."""
        elements = 6 * length * self.embed_dims + self.num_heads * self.head_dims**2
        return elements, elements

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        q, k, v = self._qkv(x)
        phi_q, phi_k = q.softmax(dim=-1), k.softmax(dim=-1)
        kv = phi_k.transpose(-2, -1) @ v  # (B, heads, d, d)
        out = (phi_q @ kv).transpose(1, 2).reshape(batch, length, self.embed_dims)
        out = self.proj(out)
        return self.out_drop(self.gamma1(self.proj_drop(out)))
