"""The SSD scan as one materialised mixing matrix: y = M x (the "linear transformer" view).

M_ij = exp(sum of dt'_k A over the steps between j and i) * (C_i . B_j) * dt'_j on the causal
side (i >= j forward, i <= j reverse) and 0 elsewhere. O(L^2) memory: meant for analysis
(rank of off-diagonal blocks, token-mixing maps), not for training.
"""
import torch

from .reference import segment_sums
from .scan_inputs import preprocess_dt


def mixing_matrix(dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                  dt_bias, dt_softplus: bool, dt_limit, reverse: bool) -> torch.Tensor:
    """M (B, H, L, L) float32 from dt (B, L, H), A (H,), B and C (B, L, G, N); inputs validated."""
    heads, groups = dt.shape[2], B.shape[2]
    dtp = preprocess_dt(dt, dt_bias, dt_softplus, dt_limit).transpose(1, 2)  # (B, H, L)
    log_decay = dtp * A.float()[None, :, None]
    # decay from j to i: steps j+1 .. i (i >= j) forward, i .. j-1 (i <= j) reverse
    seg = (segment_sums(log_decay.flip(-1)).flip(-1, -2) if reverse
           else segment_sums(log_decay))
    cb = torch.einsum('bign,bjgn->bgij', C.float(), B.float())
    cb = cb.repeat_interleave(heads // groups, dim=1)  # (B, H, L, L)
    return torch.exp(seg) * cb * dtp[:, :, None, :]
