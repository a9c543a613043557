"""Chunked SSD scan in PyTorch (any device; the CPU backend): forward and backward over the
stages of ``chunk_stages.py``, called by the op in ``api.py``.

The K directions of a call (the forward and the reverse scan of a bidirectional mixer) are
stacked along the batch and go through every stage together. Accumulation in float32 (float64
for float64 inputs).

Saved for the backward pass: the op's inputs only. The backward recomputes dt', the running
sums, the masks, CB, the states entering every chunk (and, with a gate, the gate's input), as
the Triton backend does: they cost ~9 KB a token per direction at DinoVim's sizes
(H = 8, P = N = Q = 64), more than the inputs themselves.
"""
from typing import Dict, List, Optional, Tuple

import torch

from . import chunk_stages as stages
from .scan_inputs import ScanInputs

Tensor = torch.Tensor


def _layout(inp: ScanInputs) -> stages.ChunkLayout:
    return stages.ChunkLayout(inp.x, inp.B, inp.reverse, inp.chunk_size)


def _recomputed(lay: stages.ChunkLayout, inp: ScanInputs):
    """What forward and backward both compute from the inputs: dt' and s, x_dt, the decays, the
    stacked B and C and the causal CB."""
    cum = stages.dA_cumsum_fwd(lay, inp)
    x_dt = stages.dt_scaled_x(lay, inp, cum)
    decays = stages.chunk_decays(lay, cum.dA_cumsum)
    B_s, C_s = lay.stack_tokens(inp.B), lay.stack_tokens(inp.C)
    return cum, x_dt, decays, B_s, C_s, stages.chunk_cb(lay, B_s, C_s)


def forward(inp: ScanInputs) -> Tuple[Tensor, Optional[Tensor]]:
    """y (K, B, L, H, P) in x's dtype and (if asked for) the final states (K, B, H, P, N) in
    the compute dtype."""
    lay = _layout(inp)
    y, finals = _scan(lay, inp)
    return stages.chunk_scan_out_fwd(lay, y, inp), finals


def _scan(lay: stages.ChunkLayout, inp: ScanInputs) -> Tuple[Tensor, Optional[Tensor]]:
    """y (R, H, Lp, P) before D x and the gate, and the final states: the intermediates are
    freed on return, before the outputs are made."""
    cum, x_dt, decays, B_s, C_s, CB = _recomputed(lay, inp)
    y = stages.chunk_scan_diag_fwd(lay, x_dt, CB, cum)
    finals, _ = stages.state_passing_fwd(lay, x_dt, B_s, C_s, decays, inp.initial_states, y,
                                         want_final=inp.return_final_states)
    return y, finals


def backward(inp: ScanInputs, dy: Optional[Tensor], d_final: Optional[Tensor]) -> List[Tensor]:
    """Gradients of :meth:`ScanInputs.present` (stacked, in their dtypes) from those of y
    (K, B, L, H, P) and of the final states (K, B, H, P, N), each None where they got none."""
    lay = _layout(inp)
    grads = _gradients(lay, inp, dy, d_final)
    # laid out per direction once the intermediates of the backward pass are freed
    for name in ('B', 'C'):
        grads[name] = lay.unstack_tokens(grads[name], getattr(inp, name).dtype)
    return [grads[name] for name in ScanInputs.TENSORS if getattr(inp, name) is not None]


def _gradients(lay: stages.ChunkLayout, inp: ScanInputs, dy: Optional[Tensor],
               d_final: Optional[Tensor]) -> Dict[str, Optional[Tensor]]:
    """The gradients by input name, those of B and C as the stacked (R, G, Lp, N)."""
    cum, x_dt, decays, B_s, C_s, CB = _recomputed(lay, inp)
    gated = inp.z is not None  # the gate's gradient reads its input y + D x
    y = stages.chunk_scan_diag_fwd(lay, x_dt, CB, cum) if gated else None
    _, states = stages.state_passing_fwd(lay, x_dt, B_s, C_s, decays, inp.initial_states, y,
                                         want_final=False, want_states=True)
    gate_inputs = stages.chunk_scan_out_fwd(lay, y, inp, gate=False) if gated else None
    scan = stages.chunk_scan_out_bwd(lay, dy, gate_inputs, inp)
    stages.chunk_scan_diag_bwd(lay, scan.dy, x_dt, B_s, C_s, cum, CB, scan)
    d_initial = stages.state_passing_bwd(lay, states, decays, x_dt, B_s, C_s, d_final,
                                         inp.initial_states is not None, scan)
    ddt = lay.zeros(lay.rows, lay.heads, lay.padded)
    dx = stages.dt_scaled_x_bwd(lay, scan.d_x_dt, scan.dy, ddt, cum.dt, inp)
    d_dt, dA, d_bias = stages.dA_cumsum_bwd(lay, scan.ddA, scan.ddA_cumsum, ddt, cum.dt, inp)
    return dict(x=dx, dt=d_dt, A=dA, B=scan.dB, C=scan.dC, D=scan.dD, z=scan.dz,
                dt_bias=d_bias,
                initial_states=None if d_initial is None else d_initial.to(
                    inp.initial_states.dtype))
