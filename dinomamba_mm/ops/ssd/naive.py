"""Exact sequential SSD recurrence in float64: the reference the tests trust.

One Python step per token, no chunking, no segment sums: it follows the contract's semantics
(``dinomamba_mm/ops/ssd/api.py``) line by line, so it shares no formulation with the chunked
PyTorch path or the Triton kernels it checks. Slow on purpose; use only on small shapes.
"""
import math
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F


def ssd_scan_naive(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Tuple[float, float] = (0.0, float('inf')),
    initial_states: Optional[torch.Tensor] = None,
    return_final_states: bool = False,
    reverse: bool = False,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Run the SSD recurrence token by token in float64.

    Args:
        x (Tensor): (B, L, H, P) inputs.
        dt (Tensor): (B, L, H) step sizes before ``dt_bias`` / softplus / clamping.
        A (Tensor): (H,) per-head decay rates (negative for a stable scan).
        B (Tensor): (B, L, G, N) input projections, head h uses group h // (H // G).
        C (Tensor): (B, L, G, N) output projections.
        D (Tensor, optional): (H,) or (H, P) skip connection. Defaults to None.
        z (Tensor, optional): (B, L, H, P) gate, ``y * silu(z)``. Defaults to None.
        dt_bias (Tensor, optional): (H,) added to ``dt`` first. Defaults to None.
        dt_softplus (bool): Apply softplus to ``dt + dt_bias``. Defaults to False.
        dt_limit (tuple(float)): Clamp range, applied last unless it is ``(0, inf)``.
            Defaults to ``(0.0, inf)``.
        initial_states (Tensor, optional): (B, H, P, N) state before the first step (the step
            at t = L-1 when ``reverse``); zeros if None. Defaults to None.
        return_final_states (bool): Also return the state after the last step.
            Defaults to False.
        reverse (bool): Run t from L-1 down to 0. Defaults to False.

    Returns:
        Tensor | tuple(Tensor): y (B, L, H, P) float64, and final_states (B, H, P, N) float64
        if asked for.
        Differentiable with respect to every tensor input.
    """
    f64 = torch.float64
    x, dt, A, B, C = (t.to(f64) for t in (x, dt, A, B, C))
    batch, length, heads, headdim = x.shape
    groups, dstate = B.shape[2], B.shape[3]
    head_group = torch.arange(heads, device=x.device) // (heads // groups)
    B = B[:, :, head_group]  # (B, L, H, N)
    C = C[:, :, head_group]

    if dt_bias is not None:
        dt = dt + dt_bias.to(f64)
    if dt_softplus:
        dt = F.softplus(dt)
    lo, hi = float(dt_limit[0]), float(dt_limit[1])
    if lo != 0.0 or not math.isinf(hi):
        dt = dt.clamp(min=lo, max=hi)

    if initial_states is None:
        h = x.new_zeros(batch, heads, headdim, dstate)
    else:
        h = initial_states.to(f64)
    steps = range(length - 1, -1, -1) if reverse else range(length)
    ys = [None] * length
    for t in steps:
        decay = torch.exp(dt[:, t] * A)  # (B, H)
        inject = (dt[:, t, :, None, None] * x[:, t, :, :, None] * B[:, t, :, None, :])
        h = decay[:, :, None, None] * h + inject  # (B, H, P, N)
        ys[t] = torch.einsum('bhpn,bhn->bhp', h, C[:, t])
    y = torch.stack(ys, dim=1) if length > 0 else x.new_zeros(x.shape)

    if D is not None:
        D = D.to(f64)
        y = y + x * (D[:, None] if D.dim() == 1 else D)
    if z is not None:
        y = y * F.silu(z.to(f64))
    if return_final_states:
        return y, h
    return y
