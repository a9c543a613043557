"""Triton implementation of the chunked SSD scan: one launch function per stage and the
forward and backward entry points of the op in ``api.py``.

The stages are those of ``chunk_stages.py`` (the PyTorch path) with the same names; each function
below launches the kernels of ``triton_kernels.py`` for it:

  forward   dA_cumsum_fwd, chunk_state_fwd, state_passing_fwd, chunk_cb_fwd, chunk_scan_fwd
  backward  chunk_scan_bwd_dstates, state_passing_bwd, chunk_scan_chunk_state_bwd (dx and dz;
            dCB, the decay gradient and dB / dC of the diagonal blocks and the chunk state),
            dA_cumsum_bwd

Every stage runs once for all directions of a call (the direction is a grid axis): each input is
one stack of directions (K, ...) read through its strides (an input shared by the directions is
an expanded view, not a copy) and the reverse scans by index arithmetic, so nothing is flipped.
The backward pass recomputes dt', the running sums, the states and CB (cheap next to the scan
itself) instead of storing them.

The chunk of the state recurrence is ``chunk_size`` rounded down to a power of two in [16, 256]
(:func:`kernel_chunk`): 64, 128 and 256 are used as given; the result does not depend on it
beyond rounding. Inside a chunk the kernels work on tiles of ``TILE`` tokens.

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

#: Largest chunk of the state recurrence: each chunk writes a P x N float32 state per head, so a
#: longer chunk writes fewer (P N 4 / Q bytes per token and head), and state passing takes
#: L / Q sequential steps. 256 is mamba_ssm's chunk; the scan-layout kernels hold a whole chunk
#: (Q x a block of heads) in registers.
MAX_KERNEL_CHUNK = 256
#: Tokens per tile inside a chunk: the (T, T) blocks of CB and of the gradients are the largest
#: tiles a program holds, whatever the chunk. 32 keeps the backward kernels' tiles in registers on
#: sm_80 and sm_90 (tests/test_ops/test_ssd_triton_resources.py).
TILE = 32
#: tl.dot's input precision for float32 inputs on a GPU: TF32 tensor cores (operands rounded to
#: a 10-bit mantissa, float32 accumulation), Triton's default and what mamba_ssm's kernels use, on
#: sm_80 and sm_90 alike. 'tf32x3' (three TF32 products, float32-accurate) needs twice the
#: registers and spilled in most kernels on both. The error fp32 inputs get with TF32: see
#: docs/benchmarks.md, "GPU kernels: resources per target".
FP32_DOT_PRECISION = 'tf32'
#: The reverse flags travel as the bits of one integer argument.
MAX_DIRECTIONS = 63
_MIN_DOT = 16  # tl.dot needs every dimension >= 16


def kernel_chunk(chunk_size: int) -> int:
    """The kernels' chunk for the op's ``chunk_size``: the largest power of two not above it,
    within [16, MAX_KERNEL_CHUNK] (tl.dot needs 16; the tiles need a power of two)."""
    q = 1 << (max(int(chunk_size), 1).bit_length() - 1)
    return min(max(q, _MIN_DOT), MAX_KERNEL_CHUNK)


def _block(size: int) -> int:
    return max(triton.next_power_of_2(size), _MIN_DOT)


def _strides(t: Optional[Tensor], ndim: int) -> Tuple[int, ...]:
    return tuple(t.stride()) if t is not None else (0,) * ndim


def _d_strides(D: Optional[Tensor]) -> Tuple[int, int, int]:
    """(direction, head, channel) strides of D, which is (K, H) (one value per head) or
    (K, H, P)."""
    if D is None:
        return 0, 0, 0
    return (*D.stride(), 0) if D.dim() == 2 else tuple(D.stride())


def _kernel_inputs(inp: ScanInputs) -> ScanInputs:
    """The inputs as the kernels read them: each field one stack of directions (K, ...), read
    through its strides; the initial states contiguous float32 (the state passing reads them
    flat). At most MAX_DIRECTIONS directions (their reverse flags are the bits of one int)."""
    if len(inp.reverse) > MAX_DIRECTIONS:
        raise ValueError(f"impl='triton' scans at most {MAX_DIRECTIONS} directions at once, got "
                         f"K = {len(inp.reverse)} (x {tuple(inp.x.shape)}): pass impl='torch'")
    if inp.initial_states is None:
        return inp
    return dataclasses.replace(inp, initial_states=inp.initial_states.float().contiguous())


class _Meta:
    """Shapes, flags and launch constants shared by the forward and backward launches."""

    def __init__(self, inp: ScanInputs):
        x, B = inp.x, inp.B
        self.directions = x.shape[0]
        self.rev_bits = sum(int(rev) << k for k, rev in enumerate(inp.reverse))
        _, self.batch, self.seqlen, self.nheads, self.hdim = x.shape
        self.ngroups, self.dstate = B.shape[3], B.shape[4]
        self.heads_per_group = self.nheads // self.ngroups
        self.Q = kernel_chunk(inp.chunk_size)
        self.T = min(self.Q, TILE)
        self.tiles = self.Q // self.T
        self.nchunks = triton.cdiv(self.seqlen, self.Q)
        self.block_n = _block(self.dstate)
        self.softplus = bool(inp.dt_softplus)
        self.dt_min, self.dt_max = (float(v) for v in inp.dt_limit)
        self.clamp = inp.clamps_dt
        self.has_d, self.has_z = inp.D is not None, inp.z is not None
        self.has_bias = inp.dt_bias is not None
        self.dot_precision = 'ieee'
        if x.dtype == torch.float32 and x.is_cuda:
            self.dot_precision = FP32_DOT_PRECISION
        self.heads_total = self.directions * self.batch * self.nheads
        self.groups_total = self.directions * self.batch * self.ngroups
        self.device = x.device
        self.x_dtype = x.dtype
        self.sizes = (self.batch, self.seqlen, self.nheads, self.heads_per_group, self.nchunks,
                      self.hdim, self.dstate, self.rev_bits)
        self.tile_args = dict(Q=self.Q, T=self.T, DOT_PRECISION=self.dot_precision)

    def p_grid(self, META) -> Tuple[int, int, int]:
        """(direction, batch, head) x chunk x block of P."""
        return self.heads_total, self.nchunks, triton.cdiv(self.hdim, META['BLOCK_P'])

    def tile_p_grid(self, META) -> Tuple[int, int, int]:
        """(direction, batch, head) x (chunk, tile) x block of P."""
        return (self.heads_total, self.nchunks * self.tiles,
                triton.cdiv(self.hdim, META['BLOCK_P']))

    def dt_launch(self, kernel, inp: ScanInputs, *tensors: Tensor) -> None:
        """A dt' kernel (grid (direction, batch) x chunk x block of heads) on ``tensors``."""
        kernel[lambda META: (self.directions * self.batch, self.nchunks,
                             triton.cdiv(self.nheads, META['BLOCK_H']))](
            inp.dt, inp.A, inp.dt_bias, *tensors,
            self.batch, self.seqlen, self.nheads, self.nchunks, self.rev_bits, self.dt_min,
            self.dt_max, *inp.dt.stride(), *inp.A.stride(), *_strides(inp.dt_bias, 2),
            HAS_BIAS=self.has_bias, SOFTPLUS=self.softplus, CLAMP=self.clamp, Q=self.Q)

    def f32(self, *shape: int) -> Tensor:
        return torch.empty(*shape, device=self.device, dtype=torch.float32)

    def scan_layout(self) -> Tensor:
        """(K B H, nchunks, Q) float32: dt', s and the parts of their gradients, in scan
        order."""
        return self.f32(self.heads_total, self.nchunks, self.Q)

    def chunk_square(self) -> Tensor:
        """(K B G, nchunks, Q, Q) float32: CB or dCB (the tiles on and below the diagonal are
        written)."""
        return self.f32(self.groups_total, self.nchunks, self.Q, self.Q)

    def states(self) -> Tensor:
        """(K B H, nchunks, P, N) float32: a state (or its gradient) per chunk and head."""
        return self.f32(self.heads_total, self.nchunks, self.hdim, self.dstate)


# ------------------------------------------------------------------------------ forward stages
def dA_cumsum_fwd(m: _Meta, inp: ScanInputs) -> Tuple[Tensor, Tensor]:
    """dt' (float32) and s = running sum of dt' A per chunk (float64: the kernels take
    differences of it), both (K B H, nchunks, Q)."""
    dt = m.scan_layout()
    dA_cumsum = torch.empty_like(dt, dtype=torch.float64)
    m.dt_launch(kernels._dA_cumsum_fwd_kernel, inp, dt, dA_cumsum)
    return dt, dA_cumsum


def chunk_state_fwd(m: _Meta, inp: ScanInputs, dt: Tensor, dA_cumsum: Tensor) -> Tensor:
    """S_c of every chunk, (K B H, nchunks, P, N)."""
    states = m.states()
    kernels._chunk_state_fwd_kernel[m.p_grid](
        inp.x, inp.B, dt, dA_cumsum, states, *m.sizes, *inp.x.stride(), *inp.B.stride(),
        BLOCK_N=m.block_n, **m.tile_args)
    return states


def state_passing_fwd(m: _Meta, states: Tensor, dA_cumsum: Tensor,
                      initial_states: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """H_c entering every chunk, in place of S_c, and the final states (K, B, H, P, N)."""
    final = m.f32(m.directions, m.batch, m.nheads, m.hdim, m.dstate)
    kernels._state_passing_fwd_kernel[lambda META: (
        m.heads_total, triton.cdiv(m.hdim * m.dstate, META['BLOCK']))](
        states, dA_cumsum, initial_states if initial_states is not None else final, final,
        m.nchunks, m.hdim, m.dstate, HAS_INIT=initial_states is not None, Q=m.Q)
    return states, final


def chunk_cb_fwd(m: _Meta, inp: ScanInputs) -> Tensor:
    """CB_tj = C_t . B_j of every chunk, once per group: (K B G, nchunks, Q, Q) float32."""
    CB = m.chunk_square()
    kernels._chunk_cb_kernel[(m.groups_total, m.nchunks * m.tiles)](
        inp.B, inp.C, CB, m.batch, m.seqlen, m.ngroups, m.nchunks, m.dstate, m.rev_bits,
        *inp.B.stride(), *inp.C.stride(), BLOCK_N=m.block_n, **m.tile_args)
    return CB


def chunk_scan_fwd(m: _Meta, inp: ScanInputs, CB: Tensor, dt: Tensor, dA_cumsum: Tensor,
                   states: Tensor) -> Tensor:
    """y (K, B, L, H, P) in x's dtype: the diagonal blocks, the entering states, D x, the
    gate."""
    y = torch.empty(m.directions, m.batch, m.seqlen, m.nheads, m.hdim, device=m.device,
                    dtype=m.x_dtype)
    kernels._chunk_scan_fwd_kernel[m.tile_p_grid](
        inp.x, inp.C, inp.D, inp.z, CB, dt, dA_cumsum, states, y, *m.sizes,
        *inp.x.stride(), *inp.C.stride(), *_d_strides(inp.D), *_strides(inp.z, 5),
        HAS_D=m.has_d, HAS_Z=m.has_z, BLOCK_N=m.block_n, **m.tile_args)
    return y


# ------------------------------------------------------------------------------ backward stages
def chunk_scan_bwd_dstates(m: _Meta, inp: ScanInputs, dy: Tensor, dA_cumsum: Tensor) -> Tensor:
    """The part of dL/dH_c that chunk c's outputs contribute, (K B H, nchunks, P, N)."""
    dstates = m.states()
    kernels._chunk_scan_bwd_dstates_kernel[m.p_grid](
        inp.C, inp.z, dy, dA_cumsum, dstates, *m.sizes,
        *inp.C.stride(), *_strides(inp.z, 5), *dy.stride(), HAS_Z=m.has_z, BLOCK_N=m.block_n,
        **m.tile_args)
    return dstates


def state_passing_bwd(m: _Meta, dstates: Tensor, states: Tensor, dA_cumsum: Tensor,
                      d_final: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    """dL/dS_c in place of the local parts, dL/ds_last (K B H, nchunks) and dL/dH_0
    (K, B, H, P, N)."""
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
    """Outputs of :func:`chunk_scan_chunk_state_bwd` (float32)."""

    dx: Tensor  # (K, B, L, H, P)
    dz: Optional[Tensor]  # (K, B, L, H, P)
    dD: Optional[Tensor]  # (K B H, nchunks * tiles, P) partial sums
    dB: Tensor  # (K, B, L, G, N)
    dC: Tensor  # (K, B, L, G, N)
    ddA_diag: Tensor  # the diagonal blocks' part of dL/d(dt' A), scan layout
    ddt_diag: Tensor  # their part of dL/d(dt'), scan layout
    dw: Tensor  # x_j dS B_j, scan layout
    ds_off: Tensor  # exp(s_t) dy_t H_c C_t, scan layout


def chunk_scan_chunk_state_bwd(m: _Meta, inp: ScanInputs, dy: Tensor, CB: Tensor, dt: Tensor,
                               dA_cumsum: Tensor, states: Tensor,
                               dstates: Tensor) -> _ChunkGrads:
    """The backward pass of the chunk scan's diagonal blocks and of the chunk state."""
    dx = m.f32(m.directions, m.batch, m.seqlen, m.nheads, m.hdim)
    dz = torch.empty_like(dx) if m.has_z else None
    # tiles past L write no partial sum
    dD = torch.zeros(m.heads_total, m.nchunks * m.tiles, m.hdim, device=m.device,
                     dtype=torch.float32) if m.has_d else None
    x_z_dy_strides = (*inp.x.stride(), *_strides(inp.z, 5), *dy.stride())
    kernels._chunk_scan_chunk_state_bwd_dx_kernel[m.tile_p_grid](
        inp.x, inp.B, inp.C, inp.D, inp.z, dy, CB,
        dt, dA_cumsum, states, dstates, dx, dz if dz is not None else dx,
        dD if dD is not None else dx, *m.sizes,
        *inp.x.stride(), *inp.B.stride(), *inp.C.stride(), *_d_strides(inp.D),
        *_strides(inp.z, 5), *dy.stride(),
        HAS_D=m.has_d, HAS_Z=m.has_z, BLOCK_N=m.block_n, **m.tile_args)

    dCB = m.chunk_square()
    kernels._chunk_scan_bwd_dcb_kernel[(m.groups_total, m.nchunks, m.tiles * m.tiles)](
        inp.x, inp.z, dy, dt, dA_cumsum, dCB, *m.sizes[:6], m.rev_bits, *x_z_dy_strides,
        HAS_Z=m.has_z, **m.tile_args)
    ddA_diag, ddt_diag = m.scan_layout(), m.scan_layout()
    kernels._chunk_scan_bwd_ddA_kernel[(m.heads_total, m.nchunks)](
        inp.x, inp.z, dy, CB, dt, dA_cumsum, ddA_diag, ddt_diag, *m.sizes[:6], m.rev_bits,
        *x_z_dy_strides, HAS_Z=m.has_z, **m.tile_args)

    dB = m.f32(m.directions, m.batch, m.seqlen, m.ngroups, m.dstate)
    dC = torch.empty_like(dB)
    dw, ds_off = m.scan_layout(), m.scan_layout()
    kernels._chunk_scan_chunk_state_bwd_dbc_kernel[(m.groups_total, m.nchunks * m.tiles, 2)](
        inp.x, inp.B, inp.C, inp.z, dy, dCB, dt, dA_cumsum, states, dstates, dB, dC, dw,
        ds_off, *m.sizes, *inp.x.stride(), *inp.B.stride(), *inp.C.stride(),
        *_strides(inp.z, 5), *dy.stride(), HAS_Z=m.has_z, BLOCK_N=m.block_n, **m.tile_args)
    return _ChunkGrads(dx, dz, dD, dB, dC, ddA_diag, ddt_diag, dw, ds_off)


def dA_cumsum_bwd(m: _Meta, inp: ScanInputs, dt: Tensor, dA_cumsum: Tensor, grads: _ChunkGrads,
                  ddA_last: Tensor) -> Tuple[Tensor, Tensor]:
    """dL/d(dt + dt_bias) (K, B, L, H) and dA (K, H)."""
    ddt_raw = m.f32(m.directions, m.batch, m.seqlen, m.nheads)
    dA_parts = m.f32(m.heads_total, m.nchunks)
    m.dt_launch(kernels._dA_cumsum_bwd_kernel, inp, dt, dA_cumsum, grads.ddA_diag,
                grads.ddt_diag, grads.dw, grads.ds_off, ddA_last, ddt_raw, dA_parts)
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


def _states(m: _Meta, inp: ScanInputs) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """dt', s, H_c entering every chunk, the final states and CB (see the forward stages)."""
    dt, dA_cumsum = dA_cumsum_fwd(m, inp)
    states = chunk_state_fwd(m, inp, dt, dA_cumsum)
    states, final = state_passing_fwd(m, states, dA_cumsum, inp.initial_states)
    return dt, dA_cumsum, states, final, chunk_cb_fwd(m, inp)


def forward(inp: ScanInputs) -> Tuple[Tensor, Optional[Tensor]]:
    """y (K, B, L, H, P) in x's dtype and (if asked for) the final states (K, B, H, P, N)
    float32 (:func:`backward` recomputes what it needs from the inputs)."""
    with _device(inp):
        kin = _kernel_inputs(inp)
        m = _Meta(kin)
        dt, dA_cumsum, states, final, CB = _states(m, kin)
        y = chunk_scan_fwd(m, kin, CB, dt, dA_cumsum, states)
    return y, final if inp.return_final_states else None


def backward(inp: ScanInputs, dy: Optional[Tensor], d_final: Optional[Tensor]) -> List[Tensor]:
    """Gradients of :meth:`ScanInputs.present` (stacks of directions, in their dtypes) from
    those of y (K, B, L, H, P) and of the final states (K, B, H, P, N), each None where they got
    none."""
    with _device(inp):
        kin = _kernel_inputs(inp)
        m = _Meta(kin)
        dt, dA_cumsum, states, _, CB = _states(m, kin)
        # contiguous: autograd hands y.sum()'s gradient over as a stride-0 expansion, which
        # the kernels would read through a separate specialisation without vector loads
        dy = (torch.zeros(kin.x.shape, device=m.device, dtype=m.x_dtype) if dy is None
              else dy.to(m.x_dtype).contiguous())
        dstates = chunk_scan_bwd_dstates(m, kin, dy, dA_cumsum)
        dstates, ddA_last, d_initial = state_passing_bwd(m, dstates, states, dA_cumsum, d_final)
        grads = chunk_scan_chunk_state_bwd(m, kin, dy, CB, dt, dA_cumsum, states, dstates)
        ddt_raw, dA = dA_cumsum_bwd(m, kin, dt, dA_cumsum, grads, ddA_last)

    dD = None
    if m.has_d:
        dD = grads.dD.view(m.directions, m.batch, m.nheads, -1, m.hdim).sum((1, 3))
        if kin.D.dim() == 2:
            dD = dD.sum(-1)
    found = dict(x=grads.dx, dt=ddt_raw, A=dA, B=grads.dB, C=grads.dC, D=dD, z=grads.dz,
                 dt_bias=ddt_raw.sum((1, 2)) if m.has_bias else None, initial_states=d_initial)
    return [found[name].to(t.dtype) for name in ScanInputs.TENSORS
            if (t := getattr(inp, name)) is not None]
