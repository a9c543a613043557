"""Triton SSD kernels (forward and backward) against the float64 sequential oracle.

The kernels run on CPU tensors through Triton's interpreter. ``@triton.jit`` decides between
compiling and interpreting when a kernel is *defined*, so TRITON_INTERPRET=1 is set before
``triton_kernels`` is imported (and the module is re-imported if an earlier test imported it
without the interpreter); whether triton itself was imported earlier does not matter, since the
kernels call none of triton.language's own @jit helpers. The variable is restored afterwards.
The interpreter is slow: shapes are tiny (B <= 2, H <= 4, P = N = 16).

Tolerances, relative to max(1, max |reference|): fp32 1e-4 (observed ~1e-6); fp16 inputs
(x, B, C, z in fp16, the oracle run on the same fp16 values in float64) 1e-2; bf16 2e-2, through
``_gpu_products``, which makes the interpreter's tl.dot take bf16 operands as a GPU does (it
multiplies their bit patterns otherwise, so the op refuses bf16 in the plain interpreter), and
with TF32 rounding of fp32 operands shows what fp32 inputs get on a GPU. Strong decay (|A| in
[1, 16], dt' up to 8, the final state in the loss): the gradients of A, dt and dt_bias within
1e-4 of the oracle relative to their largest magnitude (s is a float64 running sum: its float32
differences were 1.9e-4 off in dA at 32-token chunks, 1.3e-3 at 64). Resources of the compiled
kernels: ``test_ssd_triton_resources.py``.
"""
import contextlib
import importlib
import math
import os
import sys
from typing import Dict, Optional

import pytest
import torch

pytest.importorskip('triton')
import triton.language as tl  # noqa: E402


def _import_interpreted_kernels() -> None:
    """Define the kernels under TRITON_INTERPRET=1, leaving the variable as it was."""
    previous = os.environ.get('TRITON_INTERPRET')
    os.environ['TRITON_INTERPRET'] = '1'
    try:
        kernels = importlib.import_module('dinomamba_mm.ops.ssd.triton_kernels')
        if not kernels.INTERPRETING:  # imported earlier without the interpreter
            importlib.reload(kernels)
    finally:
        if previous is None:
            del os.environ['TRITON_INTERPRET']
        else:
            os.environ['TRITON_INTERPRET'] = previous


_import_interpreted_kernels()

from dinomamba_mm.ops.ssd import ssd_scan, ssd_scan_directions  # noqa: E402
from dinomamba_mm.ops.ssd.naive import ssd_scan_naive  # noqa: E402
from dinomamba_mm.ops.ssd.reference import ssd_chunked_reference  # noqa: E402
from dinomamba_mm.ops.ssd.triton_chunk import _kernel_chunk  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ssd_cases import decay_gradient_errors, stacked, strong_decay_inputs  # noqa: E402

TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 2e-2}
NAMES = ('x', 'dt', 'A', 'B', 'C', 'D', 'z', 'dt_bias')


def ssd_chunk_triton(x, dt, A, B, C, chunk_size, D, z, dt_bias, dt_softplus, dt_limit,
                     initial_states, return_final_states, reverse):
    return ssd_scan(x, dt, A, B, C, chunk_size, D, z, dt_bias, dt_softplus, dt_limit,
                    initial_states, return_final_states, reverse, impl='triton')


def ssd_bidirectional_triton(x, dt, A, B, C, chunk_size, D, z, dt_bias, dt_softplus, dt_limit):
    return ssd_scan_directions(**stacked(x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=dt_bias),
                               reverse=(False, True), chunk_size=chunk_size,
                               dt_softplus=dt_softplus, dt_limit=dt_limit, impl='triton')


def _inputs(batch: int, length: int, heads: int, groups: int, dtype: torch.dtype, seed: int,
            softplus: bool, has_d: Optional[str], has_z: bool, has_bias: bool,
            strided: bool = False, headdim: int = 16,
            dstate: int = 16) -> Dict[str, Optional[torch.Tensor]]:
    """Inputs with decays slow enough (|dt' A| ~ 0.005) that states cross several chunks."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    if strided:  # x, B, C, z as views of one projection, as a Mamba-2 in_proj produces them
        width = 2 * heads * headdim + 2 * groups * dstate
        proj = randn(batch, length, width)
        cuts = [heads * headdim, groups * dstate, groups * dstate, heads * headdim]
        x, B, C, z = proj.split(cuts, dim=-1)
        x, z = x.unflatten(-1, (heads, headdim)), z.unflatten(-1, (heads, headdim))
        B, C = B.unflatten(-1, (groups, dstate)), C.unflatten(-1, (groups, dstate))
        B, C = B * 0.5, C * 0.5
    else:
        x, z = randn(batch, length, heads, headdim), randn(batch, length, heads, headdim)
        B = randn(batch, length, groups, dstate) * 0.5
        C = randn(batch, length, groups, dstate) * 0.5
    if softplus:
        dt = randn(batch, length, heads) * 0.5 - (0.0 if has_bias else 2.0)
    else:
        dt = torch.rand(batch, length, heads, generator=g) * 0.1
    out = dict(x=x.to(dtype), dt=dt, A=-(torch.rand(heads, generator=g) * 0.05 + 0.01),
               B=B.to(dtype), C=C.to(dtype), D=None, z=z.to(dtype) if has_z else None,
               dt_bias=randn(heads) * 0.3 - 2.0 if has_bias else None)
    if has_d == 'H':
        out['D'] = randn(heads)
    elif has_d == 'HP':
        out['D'] = randn(heads, headdim)
    return out


def _leaves(tensors: Dict[str, Optional[torch.Tensor]], double: bool):
    return {k: None if v is None else
            (v.detach().double() if double else v.detach().clone()).requires_grad_()
            for k, v in tensors.items()}


def _assert_close(name: str, got: torch.Tensor, ref: torch.Tensor, tol: float) -> None:
    assert got.shape == ref.shape, f'{name}: shape {tuple(got.shape)} != {tuple(ref.shape)}'
    scale = max(1.0, ref.abs().max().item())
    err = (got.double() - ref).abs().max().item()
    assert err <= tol * scale, f'{name}: max error {err:.3g} > {tol:g} * {scale:.3g}'


SCAN_CASES = [
    # (L, chunk_size, G, reverse, softplus, D, z, dt_bias, dt_limit, initial, final, dtype)
    (1, 16, 1, False, False, None, False, False, None, False, False, torch.float32),
    (1, 64, 2, True, True, 'H', True, True, None, True, True, torch.float32),
    (7, 16, 2, True, True, 'H', True, True, (0.0, 0.15), True, True, torch.float32),
    (7, 64, 1, False, False, None, False, False, None, False, True, torch.float32),
    (197, 64, 2, False, True, 'HP', True, True, (0.05, 0.3), True, True, torch.float32),
    (197, 16, 1, True, True, None, False, False, None, True, True, torch.float32),
    (257, 64, 2, True, True, 'H', True, True, None, False, True, torch.float32),
    pytest.param(257, 16, 1, False, False, 'HP', False, False, None, True, False, torch.float32,
                 marks=pytest.mark.slow),
    (197, 64, 2, True, True, 'HP', True, True, (0.05, 0.3), True, True, torch.float16),
]


@pytest.mark.parametrize(
    'length,chunk_size,groups,reverse,softplus,has_d,has_z,has_bias,dt_limit,initial,final,dtype',
    SCAN_CASES)
def test_scan_matches_oracle(length, chunk_size, groups, reverse, softplus, has_d, has_z,
                             has_bias, dt_limit, initial, final, dtype):
    batch, heads = (2, 4) if length <= 64 else (1, 2)  # the interpreter pays per program
    _check_scan(batch, length, heads, groups, 16, 16, chunk_size, reverse, softplus, has_d,
                has_z, has_bias, dt_limit, initial, final, dtype, strided=(length == 257))


def test_head_dim_and_state_size_not_powers_of_two():
    """P = 40, N = 24: masked columns, and several P blocks in the kernels that loop over P."""
    _check_scan(1, 24, 2, 2, 40, 24, 16, True, True, 'HP', True, True, (0.0, 0.3), True, True,
                torch.float32)


def _check_scan(batch, length, heads, groups, headdim, dstate, chunk_size, reverse, softplus,
                has_d, has_z, has_bias, dt_limit, initial, final, dtype, strided=False,
                tol=None):
    """ssd_chunk_triton's outputs and the gradients of every input against the oracle's."""
    tensors = _inputs(batch, length, heads, groups, dtype, seed=length + chunk_size,
                      softplus=softplus, has_d=has_d, has_z=has_z, has_bias=has_bias,
                      strided=strided, headdim=headdim, dstate=dstate)
    # the initial states and cotangents from their own generator: the inputs of a check must not
    # depend on what ran before it (the TF32 error of dt_bias's gradient varies 10x across draws)
    gen = torch.Generator().manual_seed(length + chunk_size)
    if initial:
        tensors['initial_states'] = torch.randn(batch, heads, headdim, dstate, generator=gen)
    limit = dt_limit or (0.0, float('inf'))
    ours, ref = _leaves(tensors, double=False), _leaves(tensors, double=True)
    if tensors['x'].stride() != ours['x'].stride():  # keep the strided views strided
        ours.update({k: tensors[k].detach().requires_grad_() for k in ('x', 'B', 'C', 'z')
                     if tensors[k] is not None})
    out = ssd_chunk_triton(ours['x'], ours['dt'], ours['A'], ours['B'], ours['C'], chunk_size,
                           ours['D'], ours['z'], ours['dt_bias'], softplus, limit,
                           ours.get('initial_states'), final, reverse)
    expected = ssd_scan_naive(ref['x'], ref['dt'], ref['A'], ref['B'], ref['C'], D=ref['D'],
                              z=ref['z'], dt_bias=ref['dt_bias'], dt_softplus=softplus,
                              dt_limit=limit, initial_states=ref.get('initial_states'),
                              return_final_states=final, reverse=reverse)
    outs = out if final else (out,)
    refs = expected if final else (expected,)
    chunked = ssd_chunked_reference(
        *(ref[n].detach() for n in ('x', 'dt', 'A', 'B', 'C')), chunk_size=chunk_size,
        D=ref['D'], z=ref['z'], dt_bias=ref['dt_bias'], dt_softplus=softplus, dt_limit=limit,
        initial_states=ref.get('initial_states'), return_final_states=final, reverse=reverse)
    chunked = chunked if final else (chunked,)
    for c, r in zip(chunked, refs):
        _assert_close('ssd_chunked_reference', c, r.detach(), 1e-9)
    tol = tol or TOL[dtype]
    assert outs[0].dtype == dtype
    _assert_close('y', outs[0], refs[0], tol)
    _assert_close('y against the chunked reference', outs[0], chunked[0], tol)
    if final:
        assert outs[1].dtype == torch.float32
        _assert_close('final_states', outs[1], refs[1], tol)

    cotangents = [torch.randn(r.shape, dtype=torch.float64, generator=gen) for r in refs]
    torch.autograd.backward(refs, cotangents)
    torch.autograd.backward(outs, [c.to(o.dtype) for c, o in zip(cotangents, outs)])
    for name, leaf in ours.items():
        if leaf is None:
            continue
        assert leaf.grad is not None, f'no gradient for {name}'
        assert leaf.grad.dtype == leaf.dtype
        _assert_close(f'd{name}', leaf.grad, ref[name].grad, 2 * tol)


@pytest.mark.parametrize('length,chunk_size,shared', [
    (197, 64, ('x', 'dt', 'dt_bias')),  # some inputs shared, A, B, C, D, z per direction
    (7, 16, NAMES),                     # every input shared by both directions
    (20, 16, ()),                       # every input separate
])
def test_bidirectional_matches_two_oracle_scans(length, chunk_size, shared):
    batch, heads, groups = (2, 4, 2) if length <= 64 else (1, 2, 2)
    fwd = _inputs(batch, length, heads, groups, torch.float32, seed=1, softplus=True,
                  has_d='H', has_z=True, has_bias=True)
    bwd = _inputs(batch, length, heads, groups, torch.float32, seed=2, softplus=True,
                  has_d='H', has_z=True, has_bias=True)
    ours_f, ours_b = _leaves(fwd, False), _leaves(bwd, False)
    ref_f, ref_b = _leaves(fwd, True), _leaves(bwd, True)
    for name in shared:
        ours_b[name], ref_b[name] = ours_f[name], ref_f[name]
    y_f, y_b = ssd_bidirectional_triton(
        *((ours_f[n], ours_b[n]) for n in ('x', 'dt', 'A', 'B', 'C')), chunk_size,
        *((ours_f[n], ours_b[n]) for n in ('D', 'z', 'dt_bias')), True, (0.0, 0.3))
    expected = []
    for ref, reverse in ((ref_f, False), (ref_b, True)):
        expected.append(ssd_scan_naive(
            ref['x'], ref['dt'], ref['A'], ref['B'], ref['C'], D=ref['D'], z=ref['z'],
            dt_bias=ref['dt_bias'], dt_softplus=True, dt_limit=(0.0, 0.3), reverse=reverse))
    _assert_close('y_fwd', y_f, expected[0], 1e-4)
    _assert_close('y_bwd', y_b, expected[1], 1e-4)

    cotangents = [torch.randn(r.shape, dtype=torch.float64) for r in expected]
    torch.autograd.backward(expected, cotangents)
    torch.autograd.backward([y_f, y_b], [c.float() for c in cotangents])
    for name in NAMES:
        for direction, ours, ref in (('fwd', ours_f, ref_f), ('bwd', ours_b, ref_b)):
            _assert_close(f'd{name} ({direction})', ours[name].grad, ref[name].grad, 2e-4)


def test_bidirectional_with_different_strides_per_direction():
    """Forward x contiguous, backward x a strided view: the wrapper must reconcile the strides."""
    batch, length, heads, groups = 1, 20, 2, 1
    fwd = _inputs(batch, length, heads, groups, torch.float32, 3, False, None, False, False)
    bwd = _inputs(batch, length, heads, groups, torch.float32, 4, False, None, False, False,
                  strided=True)
    y_f, y_b = ssd_bidirectional_triton(*((fwd[n], bwd[n]) for n in ('x', 'dt', 'A', 'B', 'C')),
                                        16, (None, None), (None, None), (None, None), False,
                                        (0.0, float('inf')))
    for y, t, reverse in ((y_f, fwd, False), (y_b, bwd, True)):
        ref = ssd_scan_naive(t['x'], t['dt'], t['A'], t['B'], t['C'], reverse=reverse)
        _assert_close('y', y, ref, 1e-4)


def test_public_api_dispatches_to_triton():
    tensors = _inputs(1, 40, 2, 1, torch.float32, 5, True, 'H', True, True)
    args = [tensors[n] for n in ('x', 'dt', 'A', 'B', 'C')]
    kwargs = dict(D=tensors['D'], z=tensors['z'], dt_bias=tensors['dt_bias'], dt_softplus=True)
    ref = ssd_scan_naive(*args, **kwargs)
    _assert_close('ssd_scan', ssd_scan(*args, chunk_size=256, impl='triton', **kwargs), ref, 1e-4)
    y_f, y_b = ssd_bidirectional_triton(*args, 32, kwargs['D'], kwargs['z'], kwargs['dt_bias'],
                                        True, (0.0, float('inf')))
    _assert_close('y_fwd', y_f, ref, 1e-4)
    _assert_close('y_bwd', y_b, ssd_scan_naive(*args, reverse=True, **kwargs), 1e-4)


def test_softplus_of_dt_is_exact_to_float32():
    """dt' = softplus(dt + dt_bias) over Mamba-2's dt_bias initialisation range (dt' from 1e-4 to
    0.1 and up to 4), read off y of a one-token scan with x = 1 and C . B = 1: within 1e-6 of
    float64 relative (log(1 + exp(v)) in float32 was 6.4e-5 off at dt' ~ 1e-3)."""
    batch, heads = 16, 4
    dt_prime = torch.logspace(-4, math.log10(4.0), batch * heads, dtype=torch.float64)
    raw = torch.log(torch.expm1(dt_prime)).view(batch, 1, heads)
    unit = torch.zeros(batch, 1, 1, 16)
    unit[..., 0] = 1.0
    y = ssd_scan(torch.ones(batch, 1, heads, 16), raw.float(), -torch.ones(heads), unit, unit,
                 dt_softplus=True, impl='triton')
    expected = torch.nn.functional.softplus(raw.float().double())
    error = ((y[..., 0].double() - expected) / expected).abs().max().item()
    assert error <= 1e-6, f'softplus: relative error {error:.2e}'


def test_float16_mix_beyond_the_float16_range():
    """fp16 with (C_t . B_j) dt'_j above 65504 (C . B = 16 * 64^2 = 65536, dt' ~ 1) but y, dx
    within range (x ~ 1e-3): y and every gradient finite and within 1e-2 of the oracle (the
    product went to the tensor cores as fp16 and overflowed to inf)."""
    batch, length, heads = 1, 20, 2
    g = torch.Generator().manual_seed(11)
    ours = dict(x=(torch.randn(batch, length, heads, 16, generator=g) * 1e-3).half(),
                dt=torch.rand(batch, length, heads, generator=g) + 0.5, A=-torch.ones(heads),
                B=torch.full((batch, length, 1, 16), 64.0).half(),
                C=torch.full((batch, length, 1, 16), 64.0).half())
    ours = _leaves(ours, double=False)
    ref = {k: v.detach().double().requires_grad_() for k, v in ours.items()}
    y = ssd_scan(*ours.values(), chunk_size=16, impl='triton')
    expected = ssd_scan_naive(*ref.values())
    _assert_close('y', y, expected, 1e-2)
    cotangent = torch.randn(expected.shape, generator=g, dtype=torch.float64) * 1e-3
    expected.backward(cotangent)
    y.backward(cotangent.half())
    for name in ours:
        _assert_close(f'd{name}', ours[name].grad, ref[name].grad, 2e-2)


def test_kernel_chunk_is_a_power_of_two_between_16_and_32():
    assert [_kernel_chunk(c) for c in (1, 8, 16, 17, 48, 64, 100, 256)] == \
        [16, 16, 16, 16, 32, 32, 32, 32]


def test_float64_runs_in_float64():
    """The kernels compute in float32: float64 inputs run on the torch path, and the output and
    final state stay float64 (to float64 precision)."""
    tensors = _inputs(1, 40, 2, 1, torch.float64, 7, True, 'H', True, True)
    args = [tensors[n] for n in ('x', 'dt', 'A', 'B', 'C')]
    kwargs = dict(D=tensors['D'], z=tensors['z'], dt_bias=tensors['dt_bias'], dt_softplus=True,
                  initial_states=torch.randn(1, 2, 16, 16, dtype=torch.float64),
                  return_final_states=True)
    y, final = ssd_scan(*args, chunk_size=16, impl='triton', **kwargs)
    ref_y, ref_final = ssd_scan_naive(*args, **kwargs)
    assert y.dtype == final.dtype == torch.float64
    _assert_close('y', y, ref_y, 1e-10)
    _assert_close('final_states', final, ref_final, 1e-10)
    pair = {k: v for k, v in kwargs.items() if k not in ('initial_states', 'return_final_states')}
    y_f, y_b = ssd_bidirectional_triton(*args, 16, pair['D'], pair['z'], pair['dt_bias'], True,
                                        (0.0, float('inf')))
    assert y_f.dtype == y_b.dtype == torch.float64
    _assert_close('y_bwd', y_b, ssd_scan_naive(*args, reverse=True, **pair), 1e-10)


def test_bfloat16_is_refused_by_the_interpreter():
    tensors = _inputs(1, 8, 2, 1, torch.bfloat16, 8, False, None, False, False)
    with pytest.raises(ValueError, match='x has dtype torch.bfloat16, which the Triton '
                                         'interpreter .* cannot compute'):
        ssd_scan(*(tensors[n] for n in ('x', 'dt', 'A', 'B', 'C')), impl='triton')


def test_empty_batch_gives_empty_outputs_and_gradients():
    tensors = _leaves(_inputs(0, 9, 2, 1, torch.float32, 9, True, 'H', False, True), False)
    y, final = ssd_chunk_triton(*(tensors[n] for n in ('x', 'dt', 'A', 'B', 'C')), 16,
                                tensors['D'], None, tensors['dt_bias'], True,
                                (0.0, float('inf')), None, True, False)
    assert y.shape == (0, 9, 2, 16) and final.shape == (0, 2, 16, 16)
    (y.sum() + final.sum()).backward()
    for name, leaf in tensors.items():
        if leaf is not None:
            assert leaf.grad.shape == leaf.shape and not leaf.grad.any(), name


@pytest.mark.parametrize('reverse,nan_x,dt_limit', [(False, True, None), (True, True, None),
                                                   (False, False, (0.01, 5.0))])
def test_nan_in_dt_does_not_reach_earlier_tokens(reverse, nan_x, dt_limit):
    """dt NaN at token t (and x, as for a NaN token): the outputs before t in scan order equal
    the oracle's on the finite prefix; from t on they are NaN, as in the recurrence."""
    length, t = 40, 21
    tensors = _inputs(1, length, 2, 1, torch.float32, 10, True, 'H', False, True)
    bad = length - 1 - t if reverse else t
    tensors['dt'][:, bad] = float('nan')
    if nan_x:
        tensors['x'][:, bad] = float('nan')
    limit = dt_limit or (0.0, float('inf'))
    y = ssd_chunk_triton(*(tensors[n] for n in ('x', 'dt', 'A', 'B', 'C')), 32, tensors['D'],
                         None, tensors['dt_bias'], True, limit, None, False, reverse)
    before = slice(bad + 1, None) if reverse else slice(0, bad)
    after = slice(0, bad + 1) if reverse else slice(bad, None)
    ref = ssd_scan_naive(*(tensors[n][:, before] if n != 'A' else tensors[n]
                           for n in ('x', 'dt', 'A', 'B', 'C')), D=tensors['D'],
                         dt_bias=tensors['dt_bias'], dt_softplus=True, dt_limit=limit,
                         reverse=reverse)
    _assert_close('y before the NaN', y[:, before], ref, 1e-4)
    assert torch.isnan(y[:, after]).all()


def _decay_gradients_triton(inputs, chunk_size, reverse, bidirectional):
    """Relative errors of the gradients of A, dt and dt_bias of the Triton path against the
    float64 oracle (``ssd_cases.decay_gradient_errors``)."""
    names = ('x', 'dt', 'A', 'B', 'C', 'D', 'dt_bias')

    def scan(ours, mode):
        if mode == 'bidirectional':
            return ssd_bidirectional_triton(*((ours[n], ours[n]) for n in names[:5]), chunk_size,
                                            (ours['D'], ours['D']), (None, None),
                                            (ours['dt_bias'], ours['dt_bias']), True,
                                            (0.0, float('inf')))
        return ssd_chunk_triton(*(ours[n] for n in names[:5]), chunk_size, ours['D'], None,
                                ours['dt_bias'], True, (0.0, float('inf')), None, True, reverse)

    mode = 'bidirectional' if bidirectional else 'reverse' if reverse else 'forward'
    return decay_gradient_errors(inputs, mode, scan)


@pytest.mark.parametrize('dt_scale,length,chunk_size,reverse,bidirectional', [
    (8, 130, 256, False, False),  # kernel chunks of 32 tokens
    (8, 130, 256, True, False),
    (2, 130, 64, False, False),
    (4, 64, 16, True, False),
    (8, 64, 16, False, True),
])
def test_decay_gradients_under_strong_decay(dt_scale, length, chunk_size, reverse,
                                            bidirectional):
    inputs = strong_decay_inputs(dt_scale, length=length, heads=2, seed=dt_scale + length)
    errors = _decay_gradients_triton(inputs, chunk_size, reverse, bidirectional)
    for name, err in errors.items():
        assert err <= 1e-4, f'd{name}: relative error {err:.2e}'


@contextlib.contextmanager
def _gpu_products(tf32: bool = False):
    """Make the interpreter's tl.dot multiply as a GPU does.

    bf16: the interpreter keeps bf16 tiles as their uint16 bit patterns, and its tl.dot
    multiplies those as integers (so ``triton_chunk._device`` refuses bf16 in the interpreter);
    here the operands are converted to float32 first, exact for bf16 values, as tensor cores
    multiply them, and the refusal is lifted. With ``tf32``, float32 operands are rounded to
    TF32 (10-bit mantissa, to nearest, ties away from zero), as tensor cores do with fp32 inputs
    (DOT_PRECISION 'tf32'); otherwise the interpreter multiplies in exact float32.
    """
    import numpy as np
    from triton.runtime import interpreter

    from dinomamba_mm.ops.ssd import triton_chunk

    exact, device = interpreter.InterpreterBuilder.create_dot, triton_chunk._device

    def as_gpu(handle):
        data = handle.data
        if handle.dtype.scalar == tl.bfloat16:
            data = (data.astype(np.uint32) << 16).view(np.float32)
        elif tf32 and data.dtype == np.float32:
            data = ((data.view(np.int32) + 0x1000) & ~0x1FFF).view(np.float32)
        return interpreter.TensorHandle(data, tl.float32 if data is not handle.data
                                        else handle.dtype.scalar)

    def device_bf16(inp):  # the interpreter's bf16 refusal lifted; the launch context kept
        return contextlib.nullcontext()

    interpreter.InterpreterBuilder.create_dot = lambda self, a, b, *rest: exact(
        self, as_gpu(a), as_gpu(b), *rest)
    triton_chunk._device = device_bf16
    try:
        yield
    finally:
        interpreter.InterpreterBuilder.create_dot, triton_chunk._device = exact, device


@pytest.mark.parametrize('reverse', [False, True])
def test_bfloat16_forward_and_backward(reverse):
    """bf16 x, B, C, z (the oracle in float64 on the same bf16 values): y, the final state and
    every gradient within 2e-2 / 4e-2 relative to max(1, max |reference|)."""
    with _gpu_products():
        _check_scan(2, 40, 2, 1, 16, 16, 16, reverse, True, 'H', True, True, None, True, True,
                    torch.bfloat16)


def test_fp32_error_with_tf32_products():
    """What fp32 inputs get on a GPU, whose products round to TF32: y, the final state and every
    gradient within 2e-3 of the float64 oracle (relative to max(1, max |reference|)) for this
    draw (1.2e-3, in dt_bias's gradient), against 1e-4 with exact float32 products. Over 14
    draws of the initial states and cotangents the largest error was <= 1.2e-3 in 13 and 6.4e-3
    in one, each time in dt_bias's gradient (a sum over every token whose terms cancel)."""
    with _gpu_products(tf32=True):
        with pytest.raises(AssertionError, match='max error'):  # the rounding is in effect
            _check_scan(2, 40, 2, 1, 16, 16, 16, False, True, 'H', True, True, None, True,
                        True, torch.float32, tol=1e-5)
        _check_scan(2, 40, 2, 1, 16, 16, 16, False, True, 'H', True, True, None, True, True,
                    torch.float32, tol=2e-3)


def test_decay_gradients_with_tf32_products():
    """Strong decay (dt' up to 8) with TF32 products: dA within 6e-2 relative to its largest
    magnitude (observed 2.9e-2, bf16's order; 5e-5 with exact float32 products), dt and dt_bias
    within 2e-3 (observed 3.9e-4)."""
    inputs = strong_decay_inputs(8, length=130, heads=2, seed=138)
    with _gpu_products(tf32=True):
        errors = _decay_gradients_triton(inputs, 256, False, False)
    for name, err in errors.items():
        assert err <= (6e-2 if name == 'A' else 2e-3), f'd{name}: relative error {err:.2e}'
