"""Shared input builders for the SSD tests (torch path and API): random, small, reproducible."""
import math
from typing import Dict, Optional

import torch


def make_inputs(batch: int = 2, length: int = 7, heads: int = 4, headdim: int = 3,
                groups: int = 1, dstate: int = 5, seed: int = 0, D: Optional[str] = None,
                z: bool = False, dt_bias: bool = False, initial_states: bool = False,
                softplus: bool = True, A_range=(0.01, 0.3)) -> Dict[str, torch.Tensor]:
    """float64 inputs of ``ssd_scan`` (only the optional ones asked for are present).

    D is None, 'H' for shape (H,) or 'HP' for shape (H, P). Decays are slow (dt' ~ 0.13,
    |A| <= 0.3) so that states matter across several chunks: a bug in the state passing shows.
    With ``softplus`` the raw dt sits around -2 (softplus ~ 0.13); without it dt is in [0.02, 0.2].
    """
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=1.0):
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale

    lo, hi = A_range
    if softplus:
        dt = rnd(batch, length, heads, scale=0.5) - 2.0
    else:
        dt = 0.02 + 0.18 * torch.rand(batch, length, heads, generator=gen, dtype=torch.float64)
    out = dict(x=rnd(batch, length, heads, headdim), dt=dt,
               A=-(lo + (hi - lo) * torch.rand(heads, generator=gen, dtype=torch.float64)),
               B=rnd(batch, length, groups, dstate), C=rnd(batch, length, groups, dstate))
    if D == 'H':
        out['D'] = rnd(heads)
    elif D == 'HP':
        out['D'] = rnd(heads, headdim)
    if z:
        out['z'] = rnd(batch, length, heads, headdim)
    if dt_bias:
        out['dt_bias'] = rnd(heads, scale=0.5)
    if initial_states:
        out['initial_states'] = rnd(batch, heads, headdim, dstate)
    return out


def cast(inputs: Dict[str, torch.Tensor], dtype: torch.dtype, grad: bool = False,
         activations_only: bool = True) -> Dict[str, torch.Tensor]:
    """Copies as leaves; with ``activations_only`` only x, B, C, z (and dt) change dtype, as in a
    model whose parameters A, D, dt_bias stay float32."""
    out = {}
    for name, t in inputs.items():
        to = dtype
        if activations_only and name in ('A', 'D', 'dt_bias', 'initial_states') and \
                dtype in (torch.float16, torch.bfloat16):
            to = torch.float32
        out[name] = t.detach().to(to).requires_grad_(grad)
    return out


def weighted_sum(outputs, weights) -> torch.Tensor:
    """A scalar that depends on every output element (random weights, so no symmetry hides bugs)."""
    return sum((o.double() * w).sum() for o, w in zip(outputs, weights))


def strong_decay_inputs(dt_scale: float, batch: int = 1, length: int = 130, heads: int = 4,
                        headdim: int = 16, dstate: int = 16, seed: int = 0
                        ) -> Dict[str, torch.Tensor]:
    """float64 inputs with Mamba-2's decay range: A = -exp(A_log), |A| in [1, 16], and dt' (after
    dt_bias and softplus) in [0.5, 1.5] * dt_scale, at most 8 (dt' |A| up to 128 per step)."""
    gen = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    dt_after = (dt_scale * (0.5 + torch.rand(batch, length, heads, generator=gen, dtype=f64)))
    dt_after = dt_after.clamp(max=8.0)
    dt_bias = torch.randn(heads, generator=gen, dtype=f64)
    return dict(
        x=torch.randn(batch, length, heads, headdim, generator=gen, dtype=f64),
        dt=dt_after + torch.log(-torch.expm1(-dt_after)) - dt_bias,  # softplus^-1, minus bias
        A=-torch.exp(torch.rand(heads, generator=gen, dtype=f64) * math.log(16.0)),
        B=torch.randn(batch, length, 1, dstate, generator=gen, dtype=f64) * 0.5,
        C=torch.randn(batch, length, 1, dstate, generator=gen, dtype=f64) * 0.5,
        D=torch.randn(heads, generator=gen, dtype=f64), dt_bias=dt_bias)


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |actual - expected| / max |expected| over the tensor."""
    return ((actual.double() - expected).abs().max() / expected.abs().max()).item()


def decay_gradient_errors(inputs: Dict[str, torch.Tensor], mode: str, scan) -> Dict[str, float]:
    """Relative errors of the gradients of A, dt and dt_bias that ``scan(float32 leaves, mode)``
    (a tuple of outputs) gives against the float64 oracle on the same float32 values; ``mode``
    'forward' or 'reverse' (outputs y and the final state) or 'bidirectional' (y of each
    direction). The loss weights every output by fixed random weights."""
    from dinomamba_mm.ops.ssd.naive import ssd_scan_naive
    ours = {k: v.float().requires_grad_() for k, v in inputs.items()}
    ref = {k: v.float().double().requires_grad_() for k, v in inputs.items()}
    if mode == 'bidirectional':
        refs = [ssd_scan_naive(**ref, dt_softplus=True, reverse=r) for r in (False, True)]
    else:
        refs = ssd_scan_naive(**ref, dt_softplus=True, reverse=mode == 'reverse',
                              return_final_states=True)
    outs = scan(ours, mode)
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(r.shape, generator=gen, dtype=torch.float64).to(r.device)
               for r in refs]
    sum((o.double() * w).sum() for o, w in zip(outs, weights)).backward()
    sum((r * w).sum() for r, w in zip(refs, weights)).backward()
    return {n: relative_error(ours[n].grad, ref[n].grad) for n in ('A', 'dt', 'dt_bias')}


def stacked(directions: int = 2, **values) -> Dict[str, Optional[torch.Tensor]]:
    """Keyword arguments of ``ssd_scan_directions`` from per-direction values: a tuple or list
    (one tensor per direction) is stacked, one tensor shared by every direction is expanded
    (stride 0, no copy), None stays None. Gradients reach the given tensors."""
    out = {}
    for name, value in values.items():
        if isinstance(value, (tuple, list)):
            assert len(value) == directions, (name, len(value))
            out[name] = None if value[0] is None else torch.stack(list(value))
        else:
            out[name] = None if value is None else value.expand(directions, *value.shape)
    return out
