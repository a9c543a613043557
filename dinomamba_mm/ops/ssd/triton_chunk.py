"""Triton implementation of the chunked SSD scan: one launch function per stage and the
forward and backward entry points of the op in ``api.py``.

The stages are those of ``chunk_stages.py`` (the PyTorch path) with the same names; each function
below launches the kernels of ``triton_kernels.py`` for it:

  forward   dA_cumsum_fwd, chunk_state_fwd, state_passing_fwd, chunk_scan_fwd
  backward  chunk_scan_bwd_dstates, state_passing_bwd, chunk_scan_chunk_state_bwd (the diagonal
            blocks of the chunk scan and the chunk state in two kernels that read x, B, C and dy
            once), dA_cumsum_bwd

Every stage runs once for both directions of a bidirectional call (the direction is a grid axis):
each direction's tensors are read through their own pointers and the reverse scan by index
arithmetic, so nothing is flipped or copied. The backward pass recomputes dt', the running sums
and the states (cheap next to the scan itself) instead of storing them.

``forward`` and ``backward`` take a :class:`ScanInputs` (validated by ``api.py``, which sends
float64 inputs and empty batches to the torch backend) and run on CUDA tensors, or on CPU tensors
when the kernels were defined under ``TRITON_INTERPRET=1``.
"""
import contextlib
import dataclasses
from typing import List, Optional, Tuple

import torch
import triton

from . import triton_kernels as kernels
from .scan_inputs import ScanInputs

Tensor = torch.Tensor

#: Largest chunk length used inside the kernels: the public ``chunk_size`` only bounds the chunk
#: length (the result does not depend on it). 32 keeps the (Q, Q) tiles of the backward chunk
#: kernel in registers on sm_80 and sm_90; at 64 it spilled in every config (sm_90 fp32, sm_80
#: bf16 / fp16; tests/test_ops/test_ssd_triton_resources.py).
MAX_KERNEL_CHUNK = 32
#: tl.dot's input precision for float32 inputs on a GPU: TF32 tensor cores (operands rounded to
#: a 10-bit mantissa, float32 accumulation), Triton's default and what mamba_ssm's kernels use, on
#: sm_80 and sm_90 alike. 'tf32x3' (three TF32 products, float32-accurate) needs twice the
#: registers and spilled in most kernels on both. The error fp32 inputs get with TF32: see
#: docs/benchmarks.md, "GPU kernels: resources per target".
FP32_DOT_PRECISION = 'tf32'
_MIN_DOT = 16  # tl.dot needs every dimension >= 16


def _kernel_chunk(chunk_size: int) -> int:
    """Power of two in [16, MAX_KERNEL_CHUNK], not above ``chunk_size`` unless that is below 16."""
    q = 1 << (max(int(chunk_size), 1).bit_length() - 1)
    return min(max(q, _MIN_DOT), MAX_KERNEL_CHUNK)


def _block(size: int) -> int:
    return max(triton.next_power_of_2(size), _MIN_DOT)


def _strides(t: Optional[Tensor], ndim: int) -> Tuple[int, ...]:
    return tuple(t.stride()) if t is not None else (0,) * ndim


def _d_strides(D: Optional[Tensor]) -> Tuple[int, int]:
    """(head, channel) strides of D, which is (H,) (one value per head) or (H, P)."""
    if D is None:
        return 0, 0
    return (D.stride(0), 0) if D.dim() == 1 else tuple(D.stride())


def _kernel_inputs(inp: ScanInputs) -> ScanInputs:
    """The stacked directions as the kernels read them: two pointers per input, one per
    direction (a single-direction call passes its tensors twice), views of one stack and so
    with one set of strides; the initial states as one contiguous float32 (K, B, H, P, N)."""
    if len(inp.reverse) > 2:
        raise ValueError(f"impl='triton' scans at most 2 directions at once, got K = "
                         f"{len(inp.reverse)} (x {tuple(inp.x.shape)}): pass impl='torch'")
    h0 = inp.initial_states
    fields = dict(initial_states=(None if h0 is None else h0.float().contiguous(),))
    for name in ScanInputs.TENSORS[:-1]:
        t = getattr(inp, name)
        if name in ('A', 'dt_bias', 'D') and t is not None:
            t = t.contiguous()
        pair = inp.per_direction(name) if t is None else t.unbind(0)
        fields[name] = tuple(pair) * (2 // len(pair))
    return dataclasses.replace(inp, **fields)


class _Meta:
    """Shapes, flags and launch constants shared by the forward and backward launches."""

    def __init__(self, inp: ScanInputs):
        x, B = inp.x[0], inp.B[0]
        self.directions = len(inp.reverse)
        self.rev_bits = sum(int(rev) << k for k, rev in enumerate(inp.reverse))
        self.batch, self.seqlen, self.nheads, self.hdim = x.shape
        self.ngroups, self.dstate = B.shape[2], B.shape[3]
        self.heads_per_group = self.nheads // self.ngroups
        self.Q = _kernel_chunk(inp.chunk_size)
        self.nchunks = triton.cdiv(self.seqlen, self.Q)
        self.block_n = _block(self.dstate)
        self.softplus = bool(inp.dt_softplus)
        self.dt_min, self.dt_max = (float(v) for v in inp.dt_limit)
        self.clamp = inp.clamps_dt
        self.has_d, self.has_z = inp.D[0] is not None, inp.z[0] is not None
        self.has_bias = inp.dt_bias[0] is not None
        self.dot_precision = 'ieee'
        if x.dtype == torch.float32 and x.is_cuda:
            self.dot_precision = FP32_DOT_PRECISION
        self.heads_total = self.directions * self.batch * self.nheads
        self.device = x.device
        self.x_dtype = x.dtype
        self.sizes = (self.batch, self.seqlen, self.nheads, self.heads_per_group, self.nchunks,
                      self.hdim, self.dstate, self.rev_bits)
        self.tiles = dict(Q=self.Q, BLOCK_N=self.block_n, DOT_PRECISION=self.dot_precision)

    def p_grid(self, META) -> Tuple[int, int, int]:
        """(direction, batch, head) x chunk x block of P."""
        return self.heads_total, self.nchunks, triton.cdiv(self.hdim, META['BLOCK_P'])

    def dt_launch(self, kernel, inp: ScanInputs, *tensors: Tensor) -> None:
        """A dt' kernel (grid (direction, batch) x chunk x block of heads) on ``tensors``."""
        kernel[lambda META: (self.directions * self.batch, self.nchunks,
                             triton.cdiv(self.nheads, META['BLOCK_H']))](
            *inp.dt, *inp.A, *inp.dt_bias, *tensors,
            self.batch, self.seqlen, self.nheads, self.nchunks, self.rev_bits, self.dt_min,
            self.dt_max, *inp.dt[0].stride(),
            HAS_BIAS=self.has_bias, SOFTPLUS=self.softplus, CLAMP=self.clamp, Q=self.Q)

    def f32(self, *shape: int) -> Tensor:
        return torch.empty(*shape, device=self.device, dtype=torch.float32)

    def scan_layout(self) -> Tensor:
        """(ndir B H, nchunks, Q) float32: dt', s and their gradients, in scan order."""
        return self.f32(self.heads_total, self.nchunks, self.Q)


# ------------------------------------------------------------------------------ forward stages
def dA_cumsum_fwd(m: _Meta, inp: ScanInputs) -> Tuple[Tensor, Tensor]:
    """dt' (float32) and s = running sum of dt' A per chunk (float64: the kernels take
    differences of it), both (ndir B H, nchunks, Q)."""
    dt = m.scan_layout()
    dA_cumsum = torch.empty_like(dt, dtype=torch.float64)
    m.dt_launch(kernels._dA_cumsum_fwd_kernel, inp, dt, dA_cumsum)
    return dt, dA_cumsum


def chunk_state_fwd(m: _Meta, inp: ScanInputs, dt: Tensor, dA_cumsum: Tensor) -> Tensor:
    """S_c of every chunk, (ndir B H, nchunks, P, N)."""
    states = m.f32(m.heads_total, m.nchunks, m.hdim, m.dstate)
    kernels._chunk_state_fwd_kernel[m.p_grid](
        *inp.x, *inp.B, dt, dA_cumsum, states,
        *m.sizes, *inp.x[0].stride(), *inp.B[0].stride(), **m.tiles)
    return states


def state_passing_fwd(m: _Meta, states: Tensor, dA_cumsum: Tensor,
                      initial_states: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """H_c entering every chunk, in place of S_c, and the final states (ndir, B, H, P, N)."""
    final = m.f32(m.directions, m.batch, m.nheads, m.hdim, m.dstate)
    kernels._state_passing_fwd_kernel[lambda META: (
        m.heads_total, triton.cdiv(m.hdim * m.dstate, META['BLOCK']))](
        states, dA_cumsum, initial_states if initial_states is not None else final, final,
        m.nchunks, m.hdim, m.dstate, HAS_INIT=initial_states is not None, Q=m.Q)
    return states, final


def chunk_scan_fwd(m: _Meta, inp: ScanInputs, dt: Tensor, dA_cumsum: Tensor,
                   states: Tensor) -> Tensor:
    """y (ndir, B, L, H, P) in x's dtype: the diagonal blocks, the entering states, D x, the
    gate."""
    y = torch.empty(m.directions, m.batch, m.seqlen, m.nheads, m.hdim, device=m.device,
                    dtype=m.x_dtype)
    kernels._chunk_scan_fwd_kernel[m.p_grid](
        *inp.x, *inp.B, *inp.C, *inp.D, *inp.z, dt, dA_cumsum, states, y, *m.sizes,
        *inp.x[0].stride(), *inp.B[0].stride(), *inp.C[0].stride(),
        *_d_strides(inp.D[0]), *_strides(inp.z[0], 4),
        HAS_D=m.has_d, HAS_Z=m.has_z, **m.tiles)
    return y


# ------------------------------------------------------------------------------ backward stages
def chunk_scan_bwd_dstates(m: _Meta, inp: ScanInputs, dy: Tensor, dA_cumsum: Tensor) -> Tensor:
    """The part of dL/dH_c that chunk c's outputs contribute, (ndir B H, nchunks, P, N)."""
    dstates = m.f32(m.heads_total, m.nchunks, m.hdim, m.dstate)
    kernels._chunk_scan_bwd_dstates_kernel[m.p_grid](
        *inp.C, *inp.z, dy, dA_cumsum, dstates, *m.sizes,
        *inp.C[0].stride(), *_strides(inp.z[0], 4), HAS_Z=m.has_z, **m.tiles)
    return dstates


def state_passing_bwd(m: _Meta, dstates: Tensor, states: Tensor, dA_cumsum: Tensor,
                      d_final: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    """dL/dS_c in place of the local parts, dL/ds_last (ndir B H, nchunks) and dL/dH_0
    (ndir, B, H, P, N)."""
    d_initial = m.f32(m.directions, m.batch, m.nheads, m.hdim, m.dstate)
    blocks = {}

    def grid(META):
        blocks['n'] = triton.cdiv(m.hdim * m.dstate, META['BLOCK'])
        return m.heads_total, blocks['n']

    # room for the smallest BLOCK of any config; the kernel fills its own cdiv(P * N, BLOCK)
    min_block = min(cfg.kwargs['BLOCK'] for cfg in kernels._FLAT_CONFIGS)
    parts = torch.zeros(m.heads_total, m.nchunks, triton.cdiv(m.hdim * m.dstate, min_block),
                        device=m.device, dtype=torch.float32)
    if d_final is not None:
        d_final = d_final.float().contiguous()
    kernels._state_passing_bwd_kernel[grid](
        dstates, states, dA_cumsum, d_final if d_final is not None else d_initial, d_initial,
        parts, m.nchunks, m.hdim, m.dstate, HAS_DFINAL=d_final is not None, Q=m.Q)
    used = parts.view(-1)[:m.heads_total * m.nchunks * blocks['n']]
    ddA_last = used.view(m.heads_total, m.nchunks, blocks['n']).sum(-1).contiguous()
    return dstates, ddA_last, d_initial


@dataclasses.dataclass
class _ChunkGrads:
    """Outputs of :func:`chunk_scan_chunk_state_bwd` (float32; per head for dB, dC)."""

    dx: Tensor  # (ndir, B, L, H, P)
    dz: Optional[Tensor]  # (ndir, B, L, H, P)
    dD: Optional[Tensor]  # (ndir B H, nchunks, P) partial sums
    dB: Tensor  # (ndir, B, L, H, N)
    dC: Tensor  # (ndir, B, L, H, N)
    ddt: Tensor  # dL/d(dt') through the explicit dt' factors, scan layout
    ddA: Tensor  # dL/d(dt' A), scan layout


def chunk_scan_chunk_state_bwd(m: _Meta, inp: ScanInputs, dy: Tensor, dt: Tensor,
                               dA_cumsum: Tensor, states: Tensor, dstates: Tensor,
                               ddA_last: Tensor) -> _ChunkGrads:
    """The backward pass of the chunk scan's diagonal blocks and of the chunk state."""
    dx = m.f32(m.directions, m.batch, m.seqlen, m.nheads, m.hdim)
    dz = torch.empty_like(dx) if m.has_z else None
    dD = m.f32(m.heads_total, m.nchunks, m.hdim) if m.has_d else None
    kernels._chunk_scan_chunk_state_bwd_dx_kernel[m.p_grid](
        *inp.x, *inp.B, *inp.C, *inp.D, *inp.z, dy,
        dt, dA_cumsum, states, dstates, dx, dz if dz is not None else dx,
        dD if dD is not None else dx, *m.sizes,
        *inp.x[0].stride(), *inp.B[0].stride(), *inp.C[0].stride(),
        *_d_strides(inp.D[0]), *_strides(inp.z[0], 4),
        HAS_D=m.has_d, HAS_Z=m.has_z, **m.tiles)

    dB = m.f32(m.directions, m.batch, m.seqlen, m.nheads, m.dstate)
    dC = torch.empty_like(dB)
    ddt, ddA = m.scan_layout(), m.scan_layout()
    kernels._chunk_scan_chunk_state_bwd_dbc_kernel[(m.heads_total, m.nchunks)](
        *inp.x, *inp.B, *inp.C, *inp.z, dy,
        dt, dA_cumsum, states, dstates, ddA_last, dB, dC, ddt, ddA, *m.sizes,
        *inp.x[0].stride(), *inp.B[0].stride(), *inp.C[0].stride(), *_strides(inp.z[0], 4),
        HAS_Z=m.has_z, **m.tiles)
    return _ChunkGrads(dx, dz, dD, dB, dC, ddt, ddA)


def dA_cumsum_bwd(m: _Meta, inp: ScanInputs, dt: Tensor, ddA: Tensor,
                  ddt: Tensor) -> Tuple[Tensor, Tensor]:
    """dL/d(dt + dt_bias) (ndir, B, L, H) and dA (ndir, H)."""
    ddt_raw = m.f32(m.directions, m.batch, m.seqlen, m.nheads)
    dA_parts = m.f32(m.heads_total, m.nchunks)
    m.dt_launch(kernels._dA_cumsum_bwd_kernel, inp, dt, ddA, ddt, ddt_raw, dA_parts)
    dA = dA_parts.view(m.directions, m.batch, m.nheads, m.nchunks).sum((1, 3))
    return ddt_raw, dA


# ------------------------------------------------------------------------------ entry points
def _device(inp: ScanInputs):
    """Checks that the kernels can run on x; the context that launches them on its device
    (autograd's backward thread sets the current CUDA device itself)."""
    x = inp.x
    if not (x.is_cuda or kernels.INTERPRETING):
        raise ValueError(
            f'the Triton SSD scan needs CUDA tensors (got device {x.device}) or '
            'TRITON_INTERPRET=1 set before dinomamba_mm.ops.ssd.triton_kernels is imported')
    if kernels.INTERPRETING and not x.is_cuda and x.dtype == torch.bfloat16:
        raise ValueError('x has dtype torch.bfloat16, which the Triton interpreter '
                         '(TRITON_INTERPRET=1) cannot compute on CPU: pass float32 or float16 '
                         "tensors, or use impl='torch'")
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def _states(m: _Meta, inp: ScanInputs) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """dt', s, H_c entering every chunk and the final states (see the forward stages)."""
    dt, dA_cumsum = dA_cumsum_fwd(m, inp)
    states = chunk_state_fwd(m, inp, dt, dA_cumsum)
    states, final = state_passing_fwd(m, states, dA_cumsum, inp.initial_states[0])
    return dt, dA_cumsum, states, final


def forward(inp: ScanInputs) -> Tuple[Tensor, Optional[Tensor]]:
    """y (K, B, L, H, P) in x's dtype and (if asked for) the final states (K, B, H, P, N)
    float32 (:func:`backward` recomputes what it needs from the inputs)."""
    with _device(inp):
        inp = _kernel_inputs(inp)
        m = _Meta(inp)
        dt, dA_cumsum, states, final = _states(m, inp)
        y = chunk_scan_fwd(m, inp, dt, dA_cumsum, states)
    return y, final if inp.return_final_states else None


def backward(inp: ScanInputs, dy: Optional[Tensor], d_final: Optional[Tensor]) -> List[Tensor]:
    """Gradients of :meth:`ScanInputs.present` from those of y (K, B, L, H, P) and of the
    final states (K, B, H, P, N), each None where they got none."""
    present = inp.present()
    with _device(inp):
        kin = _kernel_inputs(inp)
        m = _Meta(kin)
        dt, dA_cumsum, states, _ = _states(m, kin)
        dy = (torch.zeros(inp.x.shape, dtype=m.x_dtype, device=m.device) if dy is None
              else dy.to(m.x_dtype).contiguous())
        dstates = chunk_scan_bwd_dstates(m, kin, dy, dA_cumsum)
        dstates, ddA_last, d_initial = state_passing_bwd(m, dstates, states, dA_cumsum, d_final)
        grads = chunk_scan_chunk_state_bwd(m, kin, dy, dt, dA_cumsum, states, dstates, ddA_last)
        ddt_raw, dA = dA_cumsum_bwd(m, kin, dt, grads.ddA, grads.ddt)

    def per_group(g: Tensor) -> Tensor:  # (ndir, B, L, H, N) -> (ndir, B, L, G, N)
        return g.view(m.directions, m.batch, m.seqlen, m.ngroups, m.heads_per_group,
                      m.dstate).sum(4)

    dD = None
    if m.has_d:
        dD = grads.dD.view(m.directions, m.batch, m.nheads, m.nchunks, m.hdim).sum((1, 3))
        dD = dD.sum(-1) if inp.D.dim() == 2 else dD
    found = dict(x=grads.dx, dt=ddt_raw, A=dA, B=per_group(grads.dB), C=per_group(grads.dC),
                 D=dD, z=grads.dz, dt_bias=ddt_raw.sum((1, 2)) if m.has_bias else None,
                 initial_states=d_initial)
    out = [found[name] for name in ScanInputs.TENSORS if getattr(inp, name) is not None]
    return [g.to(t.dtype) for g, t in zip(out, present)]
