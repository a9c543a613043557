"""Chunked SSD scan in PyTorch: the autograd Function over the stages of ``chunk_stages.py``.

Runs on any device with float32 accumulation (float64 for float64 inputs); the production path
on CPU. Several directions of one call (the forward and the reverse scan of a bidirectional
mixer) are stacked along the batch and go through every stage together.
"""
from typing import List, NamedTuple, Optional, Tuple, Union

import torch
from torch.autograd.function import once_differentiable

from . import chunk_stages as stages
from .scan_inputs import DirectionInputs, ScanOptions

Tensor = torch.Tensor

CPU_CHUNK_CAP: Optional[int] = 64
"""Longest chunk used for CPU tensors (None: no cap). The per-token cost of the diagonal blocks
grows with Q (their (Q, Q) masks are elementwise work, memory bound on a CPU) while the state
stages' shrinks with it; around 64 tokens the sum is smallest on CPUs (tools/benchmarks/ssd.py
--chunk-sweep). The result does not depend on the chunk length."""


class _Saved(NamedTuple):
    """Intermediates of the forward pass that the backward pass reads."""

    dt: Tensor
    dA_cumsum: Tensor
    x_dt: Tensor
    B: Tensor
    C: Tensor
    mask: Tensor
    CB: Tensor
    states: Tensor
    C_states: Tensor
    gate_input: Optional[Tensor]


class ChunkScanFunction(torch.autograd.Function):
    """Every direction of one call through the stages of ``chunk_stages.py``.

    ``apply(options, *tensors)``: the :class:`DirectionInputs` fields of each direction in turn.
    Returns each direction's y (B, L, H, P) in x's dtype, then (with
    ``options.return_final_states``) each direction's final state (B, H, P, N) in the compute
    dtype. Without a gradient to compute, nothing is kept for a backward pass.
    """

    @staticmethod
    def forward(ctx, options: ScanOptions, *tensors: Optional[Tensor]) -> Tuple[Tensor, ...]:
        dirs = DirectionInputs.unflatten(tensors)
        chunk_size = options.chunk_size
        if dirs[0].x.device.type == 'cpu' and CPU_CHUNK_CAP is not None:
            chunk_size = min(chunk_size, CPU_CHUNK_CAP)
        lay = stages.ChunkLayout(dirs[0].x, dirs[0].B, options.reverse, chunk_size)
        keep = any(ctx.needs_input_grad)
        cum = stages.dA_cumsum_fwd(lay, dirs, options)
        x_dt = stages.dt_scaled_x(lay, dirs, cum)
        decays = stages.chunk_decays(lay, cum.dA_cumsum)
        B_s, C_s = lay.stack_tokens([d.B for d in dirs]), lay.stack_tokens([d.C for d in dirs])
        y, diag = stages.chunk_scan_diag_fwd(lay, x_dt, B_s, C_s, cum, keep)
        passed = stages.state_passing_fwd(lay, x_dt, B_s, C_s, decays,
                                          [d.initial_states for d in dirs], y, keep,
                                          want_final=options.return_final_states)
        outs, gate_input = stages.chunk_scan_out_fwd(lay, y, dirs, keep)
        ctx.layout, ctx.options, ctx.n_inputs = lay, options, len(tensors)
        if keep:
            ctx.save_for_backward(*tensors, *_Saved(
                cum.dt, cum.dA_cumsum, x_dt, B_s, C_s, diag.mask, diag.CB, passed.states,
                passed.C_states, gate_input))
        return (*outs, *passed.final_states)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads: Optional[Tensor]) -> Tuple[Optional[Tensor], ...]:
        lay: stages.ChunkLayout = ctx.layout
        options: ScanOptions = ctx.options
        saved_tensors = ctx.saved_tensors
        dirs = DirectionInputs.unflatten(saved_tensors[:ctx.n_inputs])
        saved = _Saved(*saved_tensors[ctx.n_inputs:])
        douts = grads[:len(dirs)]
        d_finals = grads[len(dirs):] if options.return_final_states else [None] * len(dirs)
        decays = stages.chunk_decays(lay, saved.dA_cumsum)

        scan = stages.chunk_scan_out_bwd(lay, douts, saved.gate_input, dirs)
        stages.chunk_scan_diag_bwd(lay, scan.dy, saved.x_dt, saved.B, saved.C,
                                   stages.DiagSaved(saved.mask, saved.CB), scan)
        d_initial = stages.state_passing_bwd(
            lay, saved.states, saved.C_states, decays, saved.x_dt, saved.B, saved.C, d_finals,
            [d.initial_states is not None for d in dirs], scan)
        ddt = lay.zeros(lay.rows, lay.heads, lay.padded)
        dxs = stages.dt_scaled_x_bwd(lay, scan.d_x_dt, scan.dy, ddt, saved.dt, dirs)
        dts = stages.dA_cumsum_bwd(lay, scan.ddA, scan.ddA_cumsum, ddt, saved.dt, dirs, options)

        out: List[Optional[Tensor]] = []
        for k, (d, inp) in enumerate(zip(lay.directions, dirs)):
            ddt_k, dA, d_bias = dts[k]
            dB = scan.dB[d.rows, :, d.tokens].transpose(1, 2).to(inp.B.dtype)
            dC = scan.dC[d.rows, :, d.tokens].transpose(1, 2).to(inp.C.dtype)
            d_h0 = None if d_initial[k] is None else d_initial[k].to(inp.initial_states.dtype)
            out += DirectionInputs(dxs[k], ddt_k, dA, dB, dC, scan.dD[k], scan.dz[k], d_bias,
                                   d_h0).tensors()
        return (None, *out)


def _scan(options: ScanOptions, dirs: List[DirectionInputs]) -> Tuple[Tensor, ...]:
    flat = [t for d in dirs for t in d.tensors()]
    return ChunkScanFunction.apply(options, *flat)


def ssd_chunk_torch(
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    chunk_size: int = 256,
    D: Optional[Tensor] = None,
    z: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Tuple[float, float] = (0.0, float('inf')),
    initial_states: Optional[Tensor] = None,
    return_final_states: bool = False,
    reverse: bool = False,
) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Chunked SSD scan; arguments and shapes as :func:`dinomamba_mm.ops.ssd.ssd_scan`."""
    options = ScanOptions(chunk_size, dt_softplus, tuple(dt_limit), (bool(reverse), ),
                          return_final_states)
    outs = _scan(options, [DirectionInputs(x, dt, A, B, C, D, z, dt_bias, initial_states)])
    return (outs[0], outs[1]) if return_final_states else outs[0]


Pair = Tuple[Optional[Tensor], Optional[Tensor]]


def ssd_bidirectional_torch(x: Pair, dt: Pair, A: Pair, B: Pair, C: Pair, chunk_size: int,
                            D: Pair, z: Pair, dt_bias: Pair, dt_softplus: bool,
                            dt_limit: Tuple[float, float]) -> Tuple[Tensor, Tensor]:
    """Forward and reverse scans in one stacked pass; every tensor argument is a
    (forward, backward) pair (None allowed for D, z, dt_bias), all in input token order."""
    options = ScanOptions(chunk_size, dt_softplus, tuple(dt_limit), (False, True), False)
    dirs = [DirectionInputs(x[k], dt[k], A[k], B[k], C[k], D[k], z[k], dt_bias[k])
            for k in range(2)]
    y_fwd, y_bwd = _scan(options, dirs)
    return y_fwd, y_bwd
