"""Triton implementation of the chunked SSD scan: autograd Function and the two entry points.

``ssd_chunk_triton`` and ``ssd_bidirectional_triton`` take exactly the arguments of
``chunk.ssd_chunk_torch`` / ``chunk.ssd_bidirectional_torch`` (already validated by ``api.py``) and
run the kernels of ``triton_kernels.py`` on CUDA tensors, or on CPU tensors when those kernels
were defined under ``TRITON_INTERPRET=1``. The bidirectional scan launches every kernel stage once
for both directions (the direction is a grid axis), reads each direction's tensors through its own
pointers and runs the backward direction by index arithmetic, so nothing is flipped or copied.

The backward pass recomputes the chunk cumsums and states (cheap next to the scan itself) instead
of storing them.
"""
import contextlib
import math
from typing import Optional, Sequence, Tuple, Union

import torch
import triton

from . import triton_kernels as kernels

#: Largest chunk length used inside the kernels: the public ``chunk_size`` only bounds the chunk
#: length (the result does not depend on it), and 64 keeps every per-chunk tile in registers.
MAX_KERNEL_CHUNK = 64
_MIN_DOT = 16  # tl.dot needs every dimension >= 16


def _kernel_chunk(chunk_size: int) -> int:
    """Power of two in [16, 64], not above ``chunk_size`` unless that is below 16."""
    q = 1 << (max(int(chunk_size), 1).bit_length() - 1)
    return min(max(q, _MIN_DOT), MAX_KERNEL_CHUNK)


def _block(size: int) -> int:
    return max(triton.next_power_of_2(size), _MIN_DOT)


def _same_strides(pair: Sequence[Optional[torch.Tensor]]) -> Tuple[Optional[torch.Tensor], ...]:
    """Both members with one stride set (the kernels read both through one set of strides)."""
    first, second = pair
    if first is None or first is second or first.stride() == second.stride():
        return tuple(pair)
    return first.contiguous(), second.contiguous()


def _strides(t: Optional[torch.Tensor], ndim: int) -> Tuple[int, ...]:
    return tuple(t.stride()) if t is not None else (0,) * ndim


def _d_strides(D: Optional[torch.Tensor]) -> Tuple[int, int]:
    """(head, channel) strides of D, which is (H,) (one value per head) or (H, P)."""
    if D is None:
        return 0, 0
    return (D.stride(0), 0) if D.dim() == 1 else tuple(D.stride())


class _SSDChunkFunction(torch.autograd.Function):
    """One or two scan directions; per-direction tensors are passed as (dir0, dir1) pairs.

    ``directions`` = 1 uses only the first member of each pair (the second must be the same
    tensor), 2 runs dir0 forward and dir1 reversed. Returns y of shape (directions, B, L, H, P)
    in x's dtype and the final states (directions, B, H, P, N) float32.
    """

    @staticmethod
    def forward(ctx, directions: int, rev_bits: int, chunk_size: int, dt_softplus: bool,
                dt_limit: Tuple[float, float],
                x0, x1, dt0, dt1, A0, A1, B0, B1, C0, C1, D0, D1, z0, z1, bias0, bias1,
                initial_states):
        meta = _Meta(directions, rev_bits, chunk_size, dt_softplus, dt_limit, x0, B0, D0, z0,
                     bias0)
        tensors = (x0, x1, dt0, dt1, A0, A1, B0, B1, C0, C1, D0, D1, z0, z1, bias0, bias1)
        dtp, acs, states, final = _forward_states(meta, tensors, initial_states)
        y = _chunk_scan(meta, tensors, dtp, acs, states)
        ctx.meta = meta
        ctx.save_for_backward(*tensors, initial_states)
        ctx.set_materialize_grads(False)
        return y, final

    @staticmethod
    def backward(ctx, dy, dfinal):
        meta = ctx.meta
        saved = ctx.saved_tensors
        tensors, initial_states = saved[:16], saved[16]
        grads = _backward(meta, tensors, initial_states, dy, dfinal)
        return (None,) * 5 + grads


class _Meta:
    """Shapes, flags and launch constants shared by the forward and backward launches."""

    def __init__(self, directions, rev_bits, chunk_size, dt_softplus, dt_limit, x, B, D, z,
                 dt_bias):
        self.directions = directions
        self.rev_bits = rev_bits
        self.batch, self.seqlen, self.nheads, self.hdim = x.shape
        self.ngroups, self.dstate = B.shape[2], B.shape[3]
        self.heads_per_group = self.nheads // self.ngroups
        self.Q = _kernel_chunk(chunk_size)
        self.nchunks = triton.cdiv(self.seqlen, self.Q)
        self.block_n = _block(self.dstate)
        self.softplus = bool(dt_softplus)
        self.dt_min, self.dt_max = float(dt_limit[0]), float(dt_limit[1])
        self.clamp = self.dt_min != 0.0 or not math.isinf(self.dt_max)
        self.has_d, self.has_z, self.has_bias = D is not None, z is not None, dt_bias is not None
        self.dot_precision = 'tf32x3' if x.dtype == torch.float32 and x.is_cuda else 'ieee'
        self.heads_total = directions * self.batch * self.nheads


def _forward_states(meta: _Meta, tensors, initial_states):
    """Stages 1-3: dt', the chunk cumsums a, and the incoming state of every chunk."""
    x0, x1, dt0, dt1, A0, A1, B0, B1 = tensors[:8]
    bias0, bias1 = tensors[14:16]
    dev = x0.device
    m = meta
    dtp = torch.empty(m.heads_total, m.nchunks, m.Q, device=dev, dtype=torch.float32)
    acs = torch.empty_like(dtp)
    kernels._dt_cumsum_fwd_kernel[lambda META: (
        m.directions * m.batch, m.nchunks, triton.cdiv(m.nheads, META['BLOCK_H']))](
        dt0, dt1, A0, A1, bias0, bias1, dtp, acs,
        m.batch, m.seqlen, m.nheads, m.nchunks, m.rev_bits, m.dt_min, m.dt_max,
        *dt0.stride(),
        HAS_BIAS=m.has_bias, SOFTPLUS=m.softplus, CLAMP=m.clamp, Q=m.Q)

    states = torch.empty(m.heads_total, m.nchunks, m.hdim, m.dstate, device=dev,
                         dtype=torch.float32)
    kernels._chunk_state_fwd_kernel[lambda META: (
        m.heads_total, m.nchunks, triton.cdiv(m.hdim, META['BLOCK_P']))](
        x0, x1, B0, B1, dtp, acs, states,
        m.batch, m.seqlen, m.nheads, m.heads_per_group, m.nchunks, m.hdim, m.dstate, m.rev_bits,
        *x0.stride(), *B0.stride(),
        Q=m.Q, BLOCK_N=m.block_n, DOT_PRECISION=m.dot_precision)

    final = torch.empty(m.directions, m.batch, m.nheads, m.hdim, m.dstate, device=dev,
                        dtype=torch.float32)
    kernels._state_passing_fwd_kernel[lambda META: (
        m.heads_total, triton.cdiv(m.hdim * m.dstate, META['BLOCK']))](
        states, acs, initial_states if initial_states is not None else final, final,
        m.nchunks, m.hdim, m.dstate, HAS_INIT=initial_states is not None, Q=m.Q)
    return dtp, acs, states, final


def _chunk_scan(meta: _Meta, tensors, dtp, acs, states):
    """Stage 4: y = intra-chunk mixing + incoming-state contribution + D x, gated by z."""
    x0, x1, dt0, dt1, A0, A1, B0, B1, C0, C1, D0, D1, z0, z1 = tensors[:14]
    m = meta
    y = torch.empty(m.directions, m.batch, m.seqlen, m.nheads, m.hdim, device=x0.device,
                    dtype=x0.dtype)
    kernels._chunk_scan_fwd_kernel[lambda META: (
        m.heads_total, m.nchunks, triton.cdiv(m.hdim, META['BLOCK_P']))](
        x0, x1, B0, B1, C0, C1, D0, D1, z0, z1, dtp, acs, states, y,
        m.batch, m.seqlen, m.nheads, m.heads_per_group, m.nchunks, m.hdim, m.dstate, m.rev_bits,
        *x0.stride(), *B0.stride(), *C0.stride(), *_d_strides(D0), *_strides(z0, 4),
        HAS_D=m.has_d, HAS_Z=m.has_z, Q=m.Q, BLOCK_N=m.block_n, DOT_PRECISION=m.dot_precision)
    return y


def _backward(meta: _Meta, tensors, initial_states, dy, dfinal):
    """Gradients of every tensor input, in the order of ``_SSDChunkFunction.forward``."""
    x0, x1, dt0, dt1, A0, A1, B0, B1, C0, C1, D0, D1, z0, z1, bias0, bias1 = tensors
    m = meta
    dev = x0.device
    f32 = dict(device=dev, dtype=torch.float32)
    dtp, acs, states, _ = _forward_states(meta, tensors, initial_states)
    if dy is None:
        dy = torch.zeros(m.directions, m.batch, m.seqlen, m.nheads, m.hdim, device=dev,
                         dtype=x0.dtype)
    dy = dy.contiguous()

    dstates = torch.empty_like(states)
    kernels._chunk_dstate_bwd_kernel[lambda META: (
        m.heads_total, m.nchunks, triton.cdiv(m.hdim, META['BLOCK_P']))](
        C0, C1, z0, z1, dy, acs, dstates,
        m.batch, m.seqlen, m.nheads, m.heads_per_group, m.nchunks, m.hdim, m.dstate, m.rev_bits,
        *C0.stride(), *_strides(z0, 4),
        HAS_Z=m.has_z, Q=m.Q, BLOCK_N=m.block_n, DOT_PRECISION=m.dot_precision)

    dinit = torch.empty(m.directions, m.batch, m.nheads, m.hdim, m.dstate, **f32)
    flat_blocks = {}

    def passing_grid(META):
        flat_blocks['n'] = triton.cdiv(m.hdim * m.dstate, META['BLOCK'])
        return m.heads_total, flat_blocks['n']

    # Room for the smallest BLOCK of any config; the kernel fills its own cdiv(P * N, BLOCK).
    min_block = min(cfg.kwargs['BLOCK'] for cfg in kernels._FLAT_CONFIGS)
    dalast_parts = torch.zeros(m.heads_total, m.nchunks,
                               triton.cdiv(m.hdim * m.dstate, min_block), **f32)
    if dfinal is not None:
        dfinal = dfinal.float().contiguous()
    kernels._state_passing_bwd_kernel[passing_grid](
        dstates, states, acs, dfinal if dfinal is not None else dinit, dinit, dalast_parts,
        m.nchunks, m.hdim, m.dstate, HAS_DFINAL=dfinal is not None, Q=m.Q)
    used = flat_blocks['n']
    dalast = dalast_parts.view(-1)[:m.heads_total * m.nchunks * used]
    dalast = dalast.view(m.heads_total, m.nchunks, used).sum(-1).contiguous()

    dx = torch.empty(m.directions, m.batch, m.seqlen, m.nheads, m.hdim, **f32)
    dz = torch.empty_like(dx) if m.has_z else dx
    dB = torch.empty(m.directions, m.batch, m.seqlen, m.nheads, m.dstate, **f32)
    dC = torch.empty_like(dB)
    ddt = torch.empty(m.directions, m.batch, m.seqlen, m.nheads, **f32)
    dD_parts = torch.empty(m.heads_total, m.nchunks, m.hdim, **f32) if m.has_d else dx
    dA_parts = torch.empty(m.heads_total, m.nchunks, **f32)
    kernels._chunk_bwd_dx_kernel[lambda META: (
        m.heads_total, m.nchunks, triton.cdiv(m.hdim, META['BLOCK_P']))](
        x0, x1, B0, B1, C0, C1, D0, D1, z0, z1, dy, dtp, acs, states, dstates, dx, dz, dD_parts,
        m.batch, m.seqlen, m.nheads, m.heads_per_group, m.nchunks, m.hdim, m.dstate, m.rev_bits,
        *x0.stride(), *B0.stride(), *C0.stride(), *_d_strides(D0), *_strides(z0, 4),
        HAS_D=m.has_d, HAS_Z=m.has_z, Q=m.Q, BLOCK_N=m.block_n, DOT_PRECISION=m.dot_precision)
    kernels._chunk_bwd_dbc_kernel[(m.heads_total, m.nchunks)](
        x0, x1, dt0, dt1, A0, A1, B0, B1, C0, C1, z0, z1, bias0, bias1, dy,
        dtp, acs, states, dstates, dalast, dB, dC, ddt, dA_parts,
        m.batch, m.seqlen, m.nheads, m.heads_per_group, m.nchunks, m.hdim, m.dstate, m.rev_bits,
        m.dt_min, m.dt_max,
        *x0.stride(), *dt0.stride(), *B0.stride(), *C0.stride(), *_strides(z0, 4),
        HAS_Z=m.has_z, HAS_BIAS=m.has_bias, SOFTPLUS=m.softplus, CLAMP=m.clamp,
        Q=m.Q, BLOCK_N=m.block_n, DOT_PRECISION=m.dot_precision)

    def per_group(g: torch.Tensor) -> torch.Tensor:  # (ndir, B, L, H, N) -> (ndir, B, L, G, N)
        return g.view(m.directions, m.batch, m.seqlen, m.ngroups, m.heads_per_group,
                      m.dstate).sum(4)

    dB, dC = per_group(dB), per_group(dC)
    dA = dA_parts.view(m.directions, m.batch, m.nheads, m.nchunks).sum((1, 3))
    dbias = ddt.sum((1, 2)) if m.has_bias else None
    if m.has_d:
        dD = dD_parts.view(m.directions, m.batch, m.nheads, m.nchunks, m.hdim).sum((1, 3))
        if D0.dim() == 1:
            dD = dD.sum(-1)

    grads = []
    for k in range(2):
        if k >= m.directions:
            grads.append([None] * 8)
            continue
        grads.append([
            dx[k].to(x0.dtype), ddt[k].to(dt0.dtype), dA[k].to(A0.dtype), dB[k].to(B0.dtype),
            dC[k].to(C0.dtype), dD[k].to(D0.dtype) if m.has_d else None,
            dz[k].to(z0.dtype) if m.has_z else None,
            dbias[k].to(bias0.dtype) if m.has_bias else None])
    interleaved = tuple(g for pair in zip(grads[0], grads[1]) for g in pair)
    return interleaved + (dinit[0] if initial_states is not None else None,)


def _prepare(pairs: dict):
    """Per-direction tensors with shared strides and dtypes, as the kernels read them."""
    x0 = pairs['x'][0]
    out = {}
    for name, pair in pairs.items():
        first, second = pair
        if second is not None and first is not second and second.dtype != first.dtype:
            second = second.to(first.dtype)
        if name == 'D' and first is not None and first.shape != second.shape:
            first = first.expand(x0.shape[2], x0.shape[3]) if first.dim() == 1 else first
            second = second.expand(x0.shape[2], x0.shape[3]) if second.dim() == 1 else second
        if name in ('A', 'dt_bias', 'D') and first is not None:
            first, second = first.contiguous(), second.contiguous()
        out[name] = _same_strides((first, second))
    return out


def _run(pairs: dict, directions: int, rev_bits: int, chunk_size: int, dt_softplus: bool,
         dt_limit, initial_states: Optional[torch.Tensor]):
    if not (pairs['x'][0].is_cuda or kernels.INTERPRETING):
        raise ValueError(
            f'the Triton SSD scan needs CUDA tensors (got device {pairs["x"][0].device}) or '
            'TRITON_INTERPRET=1 set before dinomamba_mm.ops.ssd.triton_kernels is imported')
    p = _prepare(pairs)
    if initial_states is not None:
        initial_states = initial_states.float().contiguous()
    flat = [t for name in ('x', 'dt', 'A', 'B', 'C', 'D', 'z', 'dt_bias') for t in p[name]]
    x = flat[0]
    # Triton launches on the current CUDA device (autograd's backward thread sets it itself).
    with torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext():
        return _SSDChunkFunction.apply(directions, rev_bits, chunk_size, dt_softplus,
                                       tuple(dt_limit), *flat, initial_states)


def ssd_chunk_triton(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor],
    z: Optional[torch.Tensor],
    dt_bias: Optional[torch.Tensor],
    dt_softplus: bool,
    dt_limit: Tuple[float, float],
    initial_states: Optional[torch.Tensor],
    return_final_states: bool,
    reverse: bool,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """One SSD scan (see ``api.ssd_scan``): x (B, L, H, P) -> y (B, L, H, P) [, (B, H, P, N)]."""
    if x.shape[1] == 0:
        y = x.new_zeros(x.shape)
        if not return_final_states:
            return y
        final = (initial_states.float() if initial_states is not None else
                 x.new_zeros(x.shape[0], x.shape[2], x.shape[3], B.shape[3], dtype=torch.float32))
        return y, final
    pairs = {name: (t, t) for name, t in (('x', x), ('dt', dt), ('A', A), ('B', B), ('C', C),
                                          ('D', D), ('z', z), ('dt_bias', dt_bias))}
    y, final = _run(pairs, 1, int(bool(reverse)), chunk_size, dt_softplus, dt_limit,
                    initial_states)
    if return_final_states:
        return y[0], final[0]
    return y[0]


def ssd_bidirectional_triton(
    x: Tuple[torch.Tensor, torch.Tensor],
    dt: Tuple[torch.Tensor, torch.Tensor],
    A: Tuple[torch.Tensor, torch.Tensor],
    B: Tuple[torch.Tensor, torch.Tensor],
    C: Tuple[torch.Tensor, torch.Tensor],
    chunk_size: int,
    D: Tuple[Optional[torch.Tensor], Optional[torch.Tensor]],
    z: Tuple[Optional[torch.Tensor], Optional[torch.Tensor]],
    dt_bias: Tuple[Optional[torch.Tensor], Optional[torch.Tensor]],
    dt_softplus: bool,
    dt_limit: Tuple[float, float],
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Forward and reverse scans in one launch per stage (see ``api.ssd_scan_bidirectional``).

    Each argument is a (forward, backward) pair, in input token order; returns (y_fwd, y_bwd).
    """
    if x[0].shape[1] == 0:
        return x[0].new_zeros(x[0].shape), x[1].new_zeros(x[1].shape)
    pairs = {name: tuple(pair) if pair is not None else (None, None)
             for name, pair in (('x', x), ('dt', dt), ('A', A), ('B', B), ('C', C), ('D', D),
                                ('z', z), ('dt_bias', dt_bias))}
    y, _ = _run(pairs, 2, 0b10, chunk_size, dt_softplus, dt_limit, None)
    return y[0], y[1]
