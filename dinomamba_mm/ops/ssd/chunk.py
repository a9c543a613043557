"""Chunked SSD scan in PyTorch (any device; the CPU backend): forward and backward over the
stages of ``chunk_stages.py``, called by the op in ``api.py``.

Several directions of one call (the forward and the reverse scan of a bidirectional mixer) are
stacked along the batch and go through every stage together. Accumulation in float32 (float64
for float64 inputs).
"""
from typing import List, Optional, Tuple

import torch

from . import chunk_stages as stages
from .scan_inputs import ScanInputs, compute_dtype

Tensor = torch.Tensor


def _layout(inp: ScanInputs) -> stages.ChunkLayout:
    return stages.ChunkLayout(inp.x[0], inp.B[0], inp.reverse, inp.chunk_size)


def forward(inp: ScanInputs, keep: bool) -> Tuple[List[Tensor], List[Tensor], List[Tensor]]:
    """Per direction y (B, L, H, P) in x's dtype and (if asked for) the final state (B, H, P, N)
    in the compute dtype; with ``keep`` the tensors :func:`backward` reads (the gate's input
    only with a gate)."""
    lay = _layout(inp)
    cum = stages.dA_cumsum_fwd(lay, inp)
    x_dt = stages.dt_scaled_x(lay, inp, cum)
    decays = stages.chunk_decays(lay, cum.dA_cumsum)
    B_s, C_s = lay.stack_tokens(inp.B), lay.stack_tokens(inp.C)
    y, mask, CB = stages.chunk_scan_diag_fwd(lay, x_dt, B_s, C_s, cum, keep)
    finals, states, C_states = stages.state_passing_fwd(
        lay, x_dt, B_s, C_s, decays, inp.initial_states, y, keep,
        want_final=inp.return_final_states)
    out, gate_input = stages.chunk_scan_out_fwd(lay, y, inp, keep)
    saved = []
    if keep:
        saved = [cum.dt, cum.dA_cumsum, x_dt, B_s, C_s, mask, CB, states, C_states] + (
            [gate_input] if gate_input is not None else [])
    return out, finals, saved


def saved_like(inp: ScanInputs) -> List[Tensor]:
    """Empty tensors shaped as the saved list of :func:`forward` with ``keep`` (for the op's
    fake implementation; sizes may be symbolic)."""
    batch, length, heads, headdim = inp.x[0].shape
    groups, dstate = inp.B[0].shape[2:]
    rows, per_group = batch * len(inp.reverse), heads // groups
    n_chunks, q = stages.chunk_layout(length, inp.chunk_size)
    padded = n_chunks * q
    dtype = compute_dtype(inp.x[0])

    def new(*shape, dtype=dtype):
        return inp.x[0].new_empty(shape, dtype=dtype)

    tokens = new(rows, groups, padded, dstate)
    saved = [new(rows, heads, padded), new(rows, heads, n_chunks, q, dtype=torch.float64),
             new(rows, heads, padded, headdim), tokens, torch.empty_like(tokens),
             new(rows, heads, n_chunks, q, q), new(rows, groups, n_chunks, q, q),
             new(rows, groups, n_chunks, dstate, per_group, headdim),
             new(rows, groups, padded, per_group, headdim)]
    if inp.z[0] is not None:
        saved.append(new(rows, length, heads, headdim))
    return saved


def backward(inp: ScanInputs, saved_tensors: List[Tensor], douts: List[Optional[Tensor]],
             d_finals: List[Optional[Tensor]]) -> List[Tensor]:
    """Gradients of :meth:`ScanInputs.present` from those of each direction's y and final
    state (None where they got none)."""
    lay = _layout(inp)
    dt, dA_cumsum, x_dt, B_s, C_s, mask, CB, states, C_states, *gate_input = saved_tensors
    decays = stages.chunk_decays(lay, dA_cumsum)
    scan = stages.chunk_scan_out_bwd(lay, douts, (gate_input or [None])[0], inp)
    stages.chunk_scan_diag_bwd(lay, scan.dy, x_dt, B_s, C_s, mask, CB, scan)
    d_initial = stages.state_passing_bwd(lay, states, C_states, decays, x_dt, B_s, C_s, d_finals,
                                         [h is not None for h in inp.initial_states], scan)
    ddt = lay.zeros(lay.rows, lay.heads, lay.padded)
    dxs = stages.dt_scaled_x_bwd(lay, scan.d_x_dt, scan.dy, ddt, dt, inp)
    dts = stages.dA_cumsum_bwd(lay, scan.ddA, scan.ddA_cumsum, ddt, dt, inp)
    grads = dict(x=dxs, dt=[g[0] for g in dts], A=[g[1] for g in dts], B=[], C=[], D=scan.dD,
                 z=scan.dz, dt_bias=[g[2] for g in dts], initial_states=[])
    for k, d in enumerate(lay.directions):
        for name, g in (('B', scan.dB), ('C', scan.dC)):
            grads[name].append(g[d.rows, :, d.tokens].transpose(1, 2).to(inp.B[k].dtype))
        h0 = inp.initial_states[k]
        grads['initial_states'].append(None if h0 is None else d_initial[k].to(h0.dtype))
    return [g for name in ScanInputs.TENSORS for g in grads[name] if g is not None]
