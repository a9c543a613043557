"""Chunked SSD scan in PyTorch (any device; the CPU backend): forward and backward over the
stages of ``chunk_stages.py``, called by the op in ``api.py``.

Several directions of one call (the forward and the reverse scan of a bidirectional mixer) are
stacked along the batch and go through every stage together. Accumulation in float32 (float64
for float64 inputs).

Saved for the backward pass: the op's inputs only. The backward recomputes dt', the running
sums, the masks, CB, the states entering every chunk (and, with a gate, the gate's input), as
the Triton backend does: they cost ~9 KB a token per direction at DinoVim's sizes
(H = 8, P = N = Q = 64), more than the inputs themselves.
"""
from typing import List, Optional, Tuple

import torch

from . import chunk_stages as stages
from .scan_inputs import ScanInputs

Tensor = torch.Tensor


def _layout(inp: ScanInputs) -> stages.ChunkLayout:
    return stages.ChunkLayout(inp.x[0], inp.B[0], inp.reverse, inp.chunk_size)


def _recomputed(lay: stages.ChunkLayout, inp: ScanInputs):
    """What forward and backward both compute from the inputs: dt' and s, x_dt, the decays, the
    stacked B and C and the causal CB."""
    cum = stages.dA_cumsum_fwd(lay, inp)
    x_dt = stages.dt_scaled_x(lay, inp, cum)
    decays = stages.chunk_decays(lay, cum.dA_cumsum)
    B_s, C_s = lay.stack_tokens(inp.B), lay.stack_tokens(inp.C)
    return cum, x_dt, decays, B_s, C_s, stages.chunk_cb(lay, B_s, C_s)


def forward(inp: ScanInputs) -> Tuple[List[Tensor], List[Tensor]]:
    """Per direction y (B, L, H, P) in x's dtype and (if asked for) the final state (B, H, P, N)
    in the compute dtype."""
    lay = _layout(inp)
    y, finals = _scan(lay, inp)
    return stages.chunk_scan_out_fwd(lay, y, inp), finals


def _scan(lay: stages.ChunkLayout, inp: ScanInputs) -> Tuple[Tensor, List[Tensor]]:
    """y (R, H, Lp, P) before D x and the gate, and the final states: the intermediates are
    freed on return, before the outputs are made."""
    cum, x_dt, decays, B_s, C_s, CB = _recomputed(lay, inp)
    y = stages.chunk_scan_diag_fwd(lay, x_dt, CB, cum)
    finals, _ = stages.state_passing_fwd(lay, x_dt, B_s, C_s, decays, inp.initial_states, y,
                                         want_final=inp.return_final_states)
    return y, finals


def backward(inp: ScanInputs, douts: List[Optional[Tensor]],
             d_finals: List[Optional[Tensor]]) -> List[Tensor]:
    """Gradients of :meth:`ScanInputs.present` from those of each direction's y and final
    state (None where they got none)."""
    lay = _layout(inp)
    cum, x_dt, decays, B_s, C_s, CB = _recomputed(lay, inp)
    gated = inp.z[0] is not None  # the gate's gradient reads its input y + D x
    y = stages.chunk_scan_diag_fwd(lay, x_dt, CB, cum) if gated else None
    _, states = stages.state_passing_fwd(lay, x_dt, B_s, C_s, decays, inp.initial_states, y,
                                         want_final=False, want_states=True)
    gate_inputs = stages.chunk_scan_out_fwd(lay, y, inp, gate=False) if gated else None
    scan = stages.chunk_scan_out_bwd(lay, douts, gate_inputs, inp)
    stages.chunk_scan_diag_bwd(lay, scan.dy, x_dt, B_s, C_s, cum, CB, scan)
    d_initial = stages.state_passing_bwd(lay, states, decays, x_dt, B_s, C_s, d_finals,
                                         [h is not None for h in inp.initial_states], scan)
    ddt = lay.zeros(lay.rows, lay.heads, lay.padded)
    dxs = stages.dt_scaled_x_bwd(lay, scan.d_x_dt, scan.dy, ddt, cum.dt, inp)
    dts = stages.dA_cumsum_bwd(lay, scan.ddA, scan.ddA_cumsum, ddt, cum.dt, inp)
    grads = dict(x=dxs, dt=[g[0] for g in dts], A=[g[1] for g in dts], B=[], C=[], D=scan.dD,
                 z=scan.dz, dt_bias=[g[2] for g in dts], initial_states=[])
    for k, d in enumerate(lay.directions):
        for name, g in (('B', scan.dB), ('C', scan.dC)):
            grads[name].append(g[d.rows, :, d.tokens].transpose(1, 2).to(inp.B[k].dtype))
        h0 = inp.initial_states[k]
        grads['initial_states'].append(None if h0 is None else d_initial[k].to(h0.dtype))
    return [g for name in ScanInputs.TENSORS for g in grads[name] if g is not None]
