"""Linear attention of the paper's LinearViT: softmax(QK^T) replaced by phi(Q) phi(K)^T."""
from typing import Tuple

import torch
from mmpretrain.models.utils import MultiheadAttention


class LinearMultiheadAttention(MultiheadAttention):
    """Multi-head linear attention, a drop-in for mmpretrain's ``MultiheadAttention``.

    For each head, with q_i, k_j, v_j the rows of Q, K, V (L x d, d = head dims),
    ``phi(q) = softmax(q)`` over the d features of one row, and the output is

        out_i = sum_j (phi(q_i) . phi(k_j)) v_j = phi(Q) (phi(K)^T V),

    computed right to left: a (d x d) summary phi(K)^T V per head, then one (L x d)(d x d)
    product, so time and memory grow linearly in the number of tokens L. No 1/sqrt(d) scale
    and no row normalisation: phi(Q) phi(K)^T replaces softmax(Q K^T) as is (non-causal).
    Parameters (``qkv``, ``proj``, layer scale) and their names are those of
    ``MultiheadAttention``, so ViT checkpoints load. ``attn_drop`` has no matrix to act on
    here and must be 0.

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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        q, k, v = self._qkv(x)
        phi_q, phi_k = q.softmax(dim=-1), k.softmax(dim=-1)
        kv = phi_k.transpose(-2, -1) @ v  # (B, heads, d, d)
        out = (phi_q @ kv).transpose(1, 2).reshape(batch, length, self.embed_dims)
        out = self.proj(out)
        return self.out_drop(self.gamma1(self.proj_drop(out)))
