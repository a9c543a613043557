"""The chunked SSD algorithm in its four stages, written for reading (einsum, autograd, float64).

The stages are those of the fast paths (``chunk_stages.py``, ``triton_chunk.py``) and of
``docs`` SSD_STAGES, with the same names; here each is a few lines of einsum over whole tensors,
the reverse scan flips the sequence and gradients come from autograd. It is a second oracle for
the tests next to the sequential recurrence of ``naive.py``: same results, other formulation.
"""
import math
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F

from .scan_inputs import preprocess_dt

Tensor = torch.Tensor


def segment_sums(a: Tensor) -> Tensor:
    """(..., T) -> (..., T, T): sum of a[j+1 .. i] for j <= i, -inf above the diagonal."""
    cumulative = torch.cumsum(a, dim=-1)
    sums = cumulative[..., :, None] - cumulative[..., None, :]
    causal = torch.ones(a.shape[-1], a.shape[-1], dtype=torch.bool, device=a.device).tril()
    return sums.masked_fill(~causal, -math.inf)


def ssd_chunked_reference(
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    chunk_size: int = 64,
    D: Optional[Tensor] = None,
    z: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Tuple[float, float] = (0.0, float('inf')),
    initial_states: Optional[Tensor] = None,
    return_final_states: bool = False,
    reverse: bool = False,
    dtype: torch.dtype = torch.float64,
) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """SSD scan by chunks; arguments and shapes as ``api.ssd_scan``, computed in ``dtype``
    (float64 for the tests; float32 where an exporter lowers the op to it).

    Returns:
        Tensor | tuple(Tensor): y (B, L, H, P), and final_states (B, H, P, N) when asked for,
        in ``dtype``.
    """

    batch, length, heads, _ = x.shape
    dt = preprocess_dt(dt, dt_bias, dt_softplus, dt_limit, dtype)
    per_group = heads // B.shape[2]
    x, B, C = x.to(dtype), B.to(dtype).repeat_interleave(per_group, 2), \
        C.to(dtype).repeat_interleave(per_group, 2)
    x_in = x  # input order, for D x
    if reverse:
        x, dt, B, C = (t.flip(1) for t in (x, dt, B, C))
    pad = -length % chunk_size  # dt' = 0 past the end: no decay, no input
    x, dt, B, C = (F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad)) for t in (x, dt, B, C))
    x, dt, B, C = (t.unflatten(1, (-1, chunk_size)) for t in (x, dt, B, C))  # (b, c, l, h, ...)

    # dA_cumsum: s = running sum of dt' A inside each chunk, (b, h, c, l)
    dA = (dt * A.to(dtype)).permute(0, 3, 1, 2)
    dA_cumsum = torch.cumsum(dA, dim=-1)
    # chunk_scan, diagonal blocks: y_i += sum_{j<=i} exp(s_i - s_j) (C_i . B_j) dt'_j x_j
    decay = torch.exp(segment_sums(dA))
    y_diag = torch.einsum('bclhn,bcshn,bhcls,bcsh,bcshp->bclhp', C, B, decay, dt, x)
    # chunk_state: S_c = sum_j exp(s_last - s_j) dt'_j x_j B_j^T
    decay_to_end = torch.exp(dA_cumsum[..., -1:] - dA_cumsum)
    chunk_states = torch.einsum('bclhn,bhcl,bclh,bclhp->bchpn', B, decay_to_end, dt, x)
    # state_passing: H_0 = initial state, H_{c+1} = exp(s_last(c)) H_c + S_c
    if initial_states is None:
        initial_states = torch.zeros_like(chunk_states[:, 0])
    chunk_states = torch.cat([initial_states.to(dtype)[:, None], chunk_states], dim=1)
    decay_chunks = torch.exp(segment_sums(F.pad(dA_cumsum[..., -1], (1, 0))))
    states = torch.einsum('bhzc,bchpn->bzhpn', decay_chunks, chunk_states)
    states, final_states = states[:, :-1], states[:, -1]
    # chunk_scan, off-diagonal: y_i += exp(s_i) C_i H_c
    y_off = torch.einsum('bclhn,bchpn,bhcl->bclhp', C, states, torch.exp(dA_cumsum))

    y = (y_diag + y_off).flatten(1, 2)[:, :length]
    if reverse:
        y = y.flip(1)
    if D is not None:
        y = y + x_in * (D.to(dtype)[:, None] if D.dim() == 1 else D.to(dtype))
    if z is not None:
        y = y * F.silu(z.to(dtype))
    return (y, final_states) if return_final_states else y
