"""Numerical robustness of the torch SSD path: long sequences and extreme dt / A.

dt' spans 1e-4 .. 1e2 (after softplus) and A spans -1e-3 .. -1e2, so dt' A reaches -1e4 per
step: any mask built from products of exponentials, or from exp of unmasked segment sums, gives
inf / nan here, while segment sums stay finite. Checked: finite outputs and gradients at
L = 16384 (fp32 and bf16, tiny B, H, P, N), and agreement with the float64 oracle at L = 600:
outputs, final states and gradients 1e-5 relative to max(1, max |reference|) (observed ~3e-7
and <= 2e-7; before the decay gradient was summed over rectangles (issue #14) d(dt) was off by up to
8e-5 here).
"""
import math
import os
import sys
import warnings

import pytest
import torch

from dinomamba_mm.ops.ssd import ssd_scan, ssd_scan_directions
from dinomamba_mm.ops.ssd.naive import ssd_scan_naive

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ssd_cases import stacked  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_thread')


def _softplus_inverse(y: torch.Tensor) -> torch.Tensor:
    return y + torch.log(-torch.expm1(-y))


def extreme_inputs(length: int, seed: int, heads: int = 4, dtype=torch.float32):
    """dt' log-uniform in [1e-4, 1e2] after softplus; A = -10^(-3 .. 2) across heads."""
    gen = torch.Generator().manual_seed(seed)
    batch, headdim, groups, dstate = 1, 2, 1, 2
    dt_after = 10 ** (torch.rand(batch, length, heads, generator=gen, dtype=torch.float64) * 6 - 4)
    tensors = dict(
        x=torch.randn(batch, length, heads, headdim, generator=gen),
        dt=_softplus_inverse(dt_after).float(),
        A=-(10 ** torch.linspace(-3, 2, heads)),
        B=torch.randn(batch, length, groups, dstate, generator=gen),
        C=torch.randn(batch, length, groups, dstate, generator=gen),
        D=torch.ones(heads),
    )
    for name in ('x', 'B', 'C'):
        tensors[name] = tensors[name].to(dtype)
    return {k: v.requires_grad_() for k, v in tensors.items()}


def test_softplus_inverse_gives_the_intended_range():
    inputs = extreme_inputs(2000, seed=0)
    dt = torch.nn.functional.softplus(inputs['dt'].detach().double())
    assert dt.min() < 2e-4 and dt.max() > 50 and dt.min() > 0.9e-4 and dt.max() < 101


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_long_sequence_extreme_values_stay_finite(dtype):
    inputs = extreme_inputs(16384, seed=1, dtype=dtype)
    y_fwd, y_bwd = ssd_scan_directions(**stacked(**inputs), reverse=(False, True),
                                       chunk_size=256, dt_softplus=True, impl='torch')
    y, final = ssd_scan(**inputs, chunk_size=256, dt_softplus=True, return_final_states=True,
                        impl='torch')
    for out in (y_fwd, y_bwd, y, final):
        assert torch.isfinite(out.float()).all()
    loss = (y_fwd.float() ** 2).mean() + (y_bwd.float() ** 2).mean() + final.square().mean()
    grads = torch.autograd.grad(loss, list(inputs.values()))
    for name, g in zip(inputs, grads):
        assert torch.isfinite(g.float()).all(), f'd{name} has non-finite values'
        assert g.float().abs().sum() > 0, f'd{name} is all zeros'


@pytest.mark.parametrize('reverse', [False, True])
def test_extreme_values_match_the_oracle(reverse):
    inputs = extreme_inputs(600, seed=2)
    y, final = ssd_scan(**inputs, chunk_size=64, dt_softplus=True, return_final_states=True,
                        reverse=reverse, impl='torch')
    ref_inputs = {k: v.detach().double().requires_grad_() for k, v in inputs.items()}
    ref, ref_final = ssd_scan_naive(**ref_inputs, dt_softplus=True, return_final_states=True,
                                    reverse=reverse)
    for name, o, r in (('y', y, ref), ('final', final, ref_final)):
        scale = max(1.0, r.abs().max().item())
        assert (o.double() - r).abs().max().item() <= 1e-5 * scale, name
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    grads = torch.autograd.grad((y.double() * w).sum() + final.sum(), list(inputs.values()))
    ref_grads = torch.autograd.grad((ref * w).sum() + ref_final.sum(), list(ref_inputs.values()))
    for name, g, r in zip(inputs, grads, ref_grads):
        scale = max(1.0, r.abs().max().item())
        err = (g.double() - r).abs().max().item()
        assert math.isfinite(err) and err <= 1e-5 * scale, f'd{name}: {err:.3e} vs {scale:.3g}'


@pytest.mark.parametrize('chunk', [16, 64])
def test_minus_infinite_A_matches_the_recurrence(chunk):
    """A = -inf (a head that forgets at every step: exp(dt' A) = 0 for dt' > 0) gives the
    recurrence's finite outputs and final state, in both scan directions, with A's gradient
    finite (0: the decay cannot change) and the others as the recurrence's."""
    inputs = extreme_inputs(37, seed=3)
    with torch.no_grad():
        inputs['A'][1] = -math.inf
    ref_in = {k: v.detach().double().requires_grad_() for k, v in inputs.items()}
    y, final = ssd_scan(**inputs, chunk_size=chunk, dt_softplus=True, return_final_states=True)
    ref_y, ref_final = ssd_scan_naive(**ref_in, dt_softplus=True, return_final_states=True)
    torch.testing.assert_close(y.double(), ref_y, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(final.double(), ref_final, rtol=1e-5, atol=1e-5)
    (y.sum() + final.sum()).backward()
    (ref_y.sum() + ref_final.sum()).backward()
    assert inputs['A'].grad[1].abs() < 1e-12
    for name in ('x', 'B', 'C', 'D'):
        torch.testing.assert_close(inputs[name].grad.double(), ref_in[name].grad, rtol=1e-4,
                                   atol=1e-4)
    y_fwd, y_bwd = ssd_scan_directions(**stacked(**inputs), reverse=(False, True),
                                       chunk_size=chunk, dt_softplus=True)
    torch.testing.assert_close(y_fwd, y)
    ref_bwd = ssd_scan_naive(**ref_in, dt_softplus=True, reverse=True)
    torch.testing.assert_close(y_bwd.double(), ref_bwd, rtol=1e-5, atol=1e-5)


def test_growing_scan_warns_once(monkeypatch):
    """A > 0 grows the state by exp(dt' A) per step; allowed (the recurrence is defined), but
    it overflows on long sequences, so the first such call warns, with the reason."""
    from dinomamba_mm.ops.ssd import chunk_stages
    monkeypatch.setattr(chunk_stages, '_GROWTH_WARNED', False)
    inputs = {k: v.detach() for k, v in extreme_inputs(20, seed=4).items()}
    inputs['A'] = inputs['A'].abs()
    with pytest.warns(UserWarning, match=r'dt\' A > 0 .* grows .* overflows'):
        ssd_scan(**inputs, dt_softplus=True)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        ssd_scan(**inputs, dt_softplus=True)
        inputs['A'] = -inputs['A']
        ssd_scan(**inputs, dt_softplus=True)


def test_meta_tensors_give_meta_outputs_of_the_right_shapes():
    """Meta tensors (shape inference without data) go through the op's fake implementation."""
    inputs = {k: v.detach().to('meta') for k, v in extreme_inputs(20, seed=5).items()}
    y, final = ssd_scan(**inputs, dt_softplus=True, return_final_states=True)
    assert y.device.type == final.device.type == 'meta'
    assert y.shape == inputs['x'].shape and final.shape == (1, 4, 2, 2)
    y_fwd, y_bwd = ssd_scan_directions(**stacked(**inputs), reverse=(False, True))
    assert y_fwd.shape == y_bwd.shape == inputs['x'].shape and y_bwd.device.type == 'meta'
