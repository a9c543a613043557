"""The SSD scan as one materialised mixing matrix: y = M x (the "linear transformer" view).

M_ij = exp(sum of dt'_k A over the steps between j and i) * (C_i . B_j) * dt'_j on the causal
side (i >= j forward, i <= j reverse) and 0 elsewhere. O(L^2) memory: meant for analysis
(rank of off-diagonal blocks, token-mixing maps), not for training.
"""
import torch

from .scan_inputs import preprocess_dt


def mixing_matrix(dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                  dt_bias, dt_softplus: bool, dt_limit, reverse: bool) -> torch.Tensor:
    """M (B, H, L, L) float32 from dt (B, L, H), A (H,), B and C (B, L, G, N); inputs validated."""
    heads, groups = dt.shape[2], B.shape[2]
    dtp = preprocess_dt(dt, dt_bias, dt_softplus, dt_limit).transpose(1, 2)  # (B, H, L)
    log_decay = dtp * A.float()[None, :, None]
    length = dtp.shape[-1]
    if reverse:
        # decay from j to i <= j: steps i .. j-1 = suffix sums s_i - s_j
        cs = torch.flip(torch.cumsum(torch.flip(log_decay, (-1,)), -1), (-1,))
        side = torch.ones(length, length, dtype=torch.bool, device=dt.device).triu()
    else:
        # decay from j to i >= j: steps j+1 .. i = prefix sums c_i - c_j
        cs = torch.cumsum(log_decay, -1)
        side = torch.ones(length, length, dtype=torch.bool, device=dt.device).tril()
    seg = (cs[..., :, None] - cs[..., None, :]).masked_fill(~side, -float('inf'))
    cb = torch.einsum('bign,bjgn->bgij', C.float(), B.float())
    cb = cb.repeat_interleave(heads // groups, dim=1)  # (B, H, L, L)
    return torch.exp(seg) * cb * dtp[:, :, None, :]
