"""Chunked SSD scan in PyTorch (any device; the CPU backend): forward and backward over the
stages of ``chunk_stages.py``, called by the op in ``api.py``.

Several directions of one call (the forward and the reverse scan of a bidirectional mixer) are
stacked along the batch and go through every stage together. Accumulation in float32 (float64
for float64 inputs).

Saved for the backward pass: the op's inputs only (and, with a gate, the gate's input y + D x).
The backward recomputes dt', the running sums, the masks, CB and the states entering every
chunk, as the Triton backend does: they cost ~9 KB a token per direction at DinoVim's sizes
(H = 8, P = N = Q = 64), more than the inputs themselves.
"""
from typing import List, Optional, Tuple

import torch

from . import chunk_stages as stages
from .scan_inputs import ScanInputs, compute_dtype

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


def forward(inp: ScanInputs, keep: bool) -> Tuple[List[Tensor], List[Tensor], List[Tensor]]:
    """Per direction y (B, L, H, P) in x's dtype and (if asked for) the final state (B, H, P, N)
    in the compute dtype; with ``keep`` and a gate the gate's input y + D x, the one tensor
    :func:`backward` does not recompute from the inputs."""
    lay = _layout(inp)
    y, finals = _scan(lay, inp)
    out, gate_input = stages.chunk_scan_out_fwd(lay, y, inp, keep)
    return out, finals, [gate_input] if gate_input is not None else []


def _scan(lay: stages.ChunkLayout, inp: ScanInputs) -> Tuple[Tensor, List[Tensor]]:
    """y (R, H, Lp, P) before D x and the gate, and the final states: the intermediates are
    freed on return, before the outputs are made."""
    cum, x_dt, decays, B_s, C_s, CB = _recomputed(lay, inp)
    y = stages.chunk_scan_diag_fwd(lay, x_dt, CB, cum)
    finals, _ = stages.state_passing_fwd(lay, x_dt, B_s, C_s, decays, inp.initial_states, y,
                                         want_final=inp.return_final_states)
    return y, finals


def saved_like(inp: ScanInputs) -> List[Tensor]:
    """Empty tensors shaped as the saved list of :func:`forward` with ``keep`` (for the op's
    fake implementation; sizes may be symbolic)."""
    if inp.z[0] is None:
        return []
    batch, length, heads, headdim = inp.x[0].shape
    return [inp.x[0].new_empty((batch * len(inp.reverse), length, heads, headdim),
                               dtype=compute_dtype(inp.x[0]))]


def backward(inp: ScanInputs, saved_tensors: List[Tensor], douts: List[Optional[Tensor]],
             d_finals: List[Optional[Tensor]]) -> List[Tensor]:
    """Gradients of :meth:`ScanInputs.present` from those of each direction's y and final
    state (None where they got none)."""
    lay = _layout(inp)
    cum, x_dt, decays, B_s, C_s, CB = _recomputed(lay, inp)
    _, states = stages.state_passing_fwd(lay, x_dt, B_s, C_s, decays, inp.initial_states, None,
                                         want_final=False)
    scan = stages.chunk_scan_out_bwd(lay, douts, (saved_tensors or [None])[0], inp)
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
