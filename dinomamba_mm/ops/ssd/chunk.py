"""Chunked SSD in PyTorch: the CPU production path (first version, autograd-differentiated)."""
import math
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F


def preprocess_dt(dt: torch.Tensor, dt_bias: Optional[torch.Tensor], dt_softplus: bool,
                  dt_limit: Tuple[float, float]) -> torch.Tensor:
    """dt' = clamp(softplus?(dt + dt_bias), *dt_limit) in float32; dt (B, L, H)."""
    dt = dt.float()
    if dt_bias is not None:
        dt = dt + dt_bias.float()
    if dt_softplus:
        dt = F.softplus(dt)
    lo, hi = float(dt_limit[0]), float(dt_limit[1])
    if lo != 0.0 or not math.isinf(hi):
        dt = dt.clamp(min=lo, max=hi)
    return dt


def _chunk_layout(length: int, chunk_size: int) -> Tuple[int, int]:
    """Number of chunks and their length: at most ``chunk_size`` tokens, padding < n_chunks."""
    n_chunks = max(1, math.ceil(length / chunk_size))
    return n_chunks, max(1, math.ceil(length / n_chunks))


def _forward_scan(x, dt, A, B, C, chunk_size, initial_states):
    """Forward-time chunked scan in float32; returns y (B, L, H, P) and final state (B, H, P, N)."""
    batch, length, heads, headdim = x.shape
    groups, dstate = B.shape[2], B.shape[3]
    per_group = heads // groups
    n_chunks, q = _chunk_layout(length, chunk_size)
    pad = n_chunks * q - length

    def chunked(t):  # (B, L, K, ...) -> (B, K, n_chunks, q, ...), zero padded at the end
        t = t.movedim(2, 1)
        if pad:
            t = F.pad(t, (0, 0) * (t.dim() - 3) + (0, pad))
        return t.reshape(t.shape[0], t.shape[1], n_chunks, q, *t.shape[3:])

    xh = chunked(x)  # (B, H, c, q, P)
    dth = chunked(dt)  # (B, H, c, q)
    Bg, Cg = chunked(B), chunked(C)  # (B, G, c, q, N)
    log_decay = dth * A[None, :, None, None]
    cs = torch.cumsum(log_decay, dim=-1)  # (B, H, c, q)
    xdt = xh * dth[..., None]

    causal = torch.ones(q, q, dtype=torch.bool, device=x.device).tril()
    seg = (cs[..., :, None] - cs[..., None, :]).masked_fill(~causal, -math.inf)
    cb = Cg @ Bg.transpose(-1, -2)  # (B, G, c, q, q)
    mix = torch.exp(seg).view(batch, groups, per_group, n_chunks, q, q) * cb[:, :, None]
    y = mix.view(batch, heads, n_chunks, q, q) @ xdt  # (B, H, c, q, P)

    to_end = torch.exp(cs[..., -1:] - cs)  # (B, H, c, q)
    xw = (xdt * to_end[..., None]).view(batch, groups, per_group, n_chunks, q, headdim)
    chunk_states = xw.transpose(-1, -2) @ Bg[:, :, None]  # (B, G, Hg, c, P, N)
    chunk_states = chunk_states.view(batch, heads, n_chunks, headdim, dstate)
    chunk_decay = torch.exp(cs[..., -1])  # (B, H, c)

    state = (x.new_zeros(batch, heads, headdim, dstate)
             if initial_states is None else initial_states.float())
    incoming = []
    for c in range(n_chunks):
        incoming.append(state)
        state = chunk_decay[:, :, c, None, None] * state + chunk_states[:, :, c]
    incoming = torch.stack(incoming, dim=2).view(batch, groups, per_group, n_chunks, headdim,
                                                 dstate)
    y_off = Cg[:, :, None] @ incoming.transpose(-1, -2)  # (B, G, Hg, c, q, P)
    y = y + y_off.view(batch, heads, n_chunks, q, headdim) * torch.exp(cs)[..., None]
    y = y.reshape(batch, heads, n_chunks * q, headdim)[:, :, :length].transpose(1, 2)
    return y, state


def ssd_chunk_torch(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int = 256,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Tuple[float, float] = (0.0, float('inf')),
    initial_states: Optional[torch.Tensor] = None,
    return_final_states: bool = False,
    reverse: bool = False,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Chunked SSD scan; see :func:`dinomamba_mm.ops.ssd.ssd_scan` for the arguments."""
    in_dtype = x.dtype
    dtp = preprocess_dt(dt, dt_bias, dt_softplus, dt_limit)
    xf, Bf, Cf = x.float(), B.float(), C.float()
    if reverse:
        y, final = _forward_scan(xf.flip(1), dtp.flip(1), A.float(), Bf.flip(1), Cf.flip(1),
                                 chunk_size, initial_states)
        y = y.flip(1)
    else:
        y, final = _forward_scan(xf, dtp, A.float(), Bf, Cf, chunk_size, initial_states)
    if D is not None:
        y = y + xf * (D.float()[:, None] if D.dim() == 1 else D.float())
    if z is not None:
        y = y * F.silu(z.float())
    y = y.to(in_dtype)
    return (y, final) if return_final_states else y


def ssd_bidirectional_torch(x, dt, A, B, C, chunk_size, D, z, dt_bias, dt_softplus, dt_limit):
    """Both directions; every tensor argument is a (forward, backward) pair, all in input order."""
    y_fwd = ssd_chunk_torch(x[0], dt[0], A[0], B[0], C[0], chunk_size, D[0], z[0], dt_bias[0],
                            dt_softplus, dt_limit)
    y_bwd = ssd_chunk_torch(x[1], dt[1], A[1], B[1], C[1], chunk_size, D[1], z[1], dt_bias[1],
                            dt_softplus, dt_limit, reverse=True)
    return y_fwd, y_bwd
