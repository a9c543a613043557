"""The chunked PyTorch SSD path (impl='torch') against the float64 sequential oracle (naive.py)
and the chunked einsum reference (reference.py).

Tolerances (relative to max(1, max |reference|), per tensor):
  fp32 inputs: outputs and gradients 1e-4 (observed ~1e-6); float32 accumulation only.
  fp16 inputs (x, dt, B, C, z in fp16; A, D, dt_bias float32; oracle on the same rounded values):
    3e-3 (fp16 output rounding is 2^-11).
  bf16 inputs: 2e-2 (bf16 output rounding is 2^-8).
  float64 inputs: torch.autograd.gradcheck (the path accumulates in float64 then).
Every value of every axis (L, chunk size, G, D, z, dt_bias, states, reverse) appears in the case
list; the cross product would be too slow for the 2-core budget (chunk_size=256 makes
256-token chunks: the torch backend uses the chunk length it is given).
Strong decay (Mamba-2's |A| in [1, 16], dt' up to 8): the gradients of A, dt and dt_bias within
1e-4 of the oracle relative to their largest magnitude (observed <= 1e-5; before the decay
gradient was summed over rectangles, up to 2e+2 at dt' = 8).
"""
import functools
import math
import os
import sys

import pytest
import torch

from dinomamba_mm.ops.ssd import ssd_mixing_matrix, ssd_scan, ssd_scan_directions
from dinomamba_mm.ops.ssd import chunk_stages
from dinomamba_mm.ops.ssd.naive import ssd_scan_naive
from dinomamba_mm.ops.ssd.reference import ssd_chunked_reference

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ssd_cases import (cast, make_inputs, relative_error, stacked,  # noqa: E402
                       strong_decay_inputs, weighted_sum)

BOTH = (False, True)  # a bidirectional mixer's directions

TOL = {torch.float32: 1e-4, torch.float16: 3e-3, torch.bfloat16: 2e-2}

pytestmark = pytest.mark.usefixtures('one_thread')

# (length, chunk_size, groups, D, z, dt_bias, states, reverse, dt_limit)
CASES = [
    (1, 16, 1, 'H', True, True, True, False, None),
    (1, 256, 2, None, False, False, True, True, None),
    (7, 16, 2, 'HP', True, True, True, True, (0.05, 0.15)),
    (7, 64, 1, None, False, False, False, False, None),
    (197, 64, 2, 'H', False, True, True, False, None),
    (197, 256, 1, 'HP', True, False, False, True, None),
    (256, 256, 1, 'HP', True, True, True, False, None),
    (256, 16, 2, None, False, False, True, True, (0.0, 0.1)),
    (257, 256, 2, 'H', True, True, True, True, None),
    (257, 64, 1, None, False, True, False, False, None),
    (1000, 64, 2, 'HP', True, True, True, True, None),
    (1000, 256, 1, None, False, True, False, False, None),
]


def _case_id(case):
    length, chunk, groups, D, z, bias, states, reverse, limit = case
    return (f'L{length}-c{chunk}-G{groups}-D{D}-z{int(z)}-bias{int(bias)}-st{int(states)}'
            f'-{"rev" if reverse else "fwd"}{"-lim" if limit else ""}')


def _assert_close(actual, expected, tol, name):
    scale = max(1.0, expected.abs().max().item())
    err = (actual.double() - expected).abs().max().item()
    assert err <= tol * scale, f'{name}: max abs error {err:.3e} > {tol:.0e} x {scale:.3g}'


def _run_both(inputs, dtype, chunk, reverse, dt_limit, states, seed=1):
    """Outputs and input gradients of the torch path (in dtype) and of the oracle (float64 on the
    same rounded values), for one random weighting of every output."""
    kwargs = dict(dt_softplus='dt_bias' in inputs, reverse=reverse,
                  return_final_states=states)
    if dt_limit is not None:
        kwargs['dt_limit'] = dt_limit
    ours_in = cast(inputs, dtype, grad=True)
    ref_in = {k: v.detach().double().requires_grad_() for k, v in ours_in.items()}
    ours = ssd_scan(**ours_in, chunk_size=chunk, impl='torch', **kwargs)
    ref = ssd_scan_naive(**ref_in, **kwargs)
    chunked = ssd_chunked_reference(**{k: v.detach() for k, v in ref_in.items()},
                                    chunk_size=chunk, **kwargs)
    for o, r, c in zip(ours if states else (ours, ), ref if states else (ref, ),
                       chunked if states else (chunked, )):
        _assert_close(c, r.detach(), 1e-9, 'ssd_chunked_reference')
        _assert_close(o.detach(), c, TOL[dtype], 'ours against the chunked reference')
    ours, ref = (ours if states else (ours, )), (ref if states else (ref, ))
    gen = torch.Generator().manual_seed(seed)
    weights = [torch.randn(r.shape, generator=gen, dtype=torch.float64) for r in ref]
    # the torch path sees its output gradient in the output dtype: round the oracle's the same way
    weights = [w.to(o.dtype).double() for w, o in zip(weights, ours)]
    names = list(ours_in)
    grads = torch.autograd.grad(weighted_sum(ours, weights), [ours_in[n] for n in names])
    ref_grads = torch.autograd.grad(weighted_sum(ref, weights), [ref_in[n] for n in names])
    return ours, ref, dict(zip(names, grads)), dict(zip(names, ref_grads))


@pytest.mark.parametrize('case', CASES, ids=_case_id)
def test_matches_oracle_fp32(case):
    length, chunk, groups, D, z, bias, states, reverse, limit = case
    inputs = make_inputs(length=length, groups=groups, D=D, z=z, dt_bias=bias,
                         initial_states=states, softplus=bias, seed=length + chunk)
    ours, ref, grads, ref_grads = _run_both(inputs, torch.float32, chunk, reverse, limit, states)
    assert ours[0].dtype == torch.float32 and ours[0].shape == ref[0].shape
    for name, o, r in zip(('y', 'final_states'), ours, ref):
        _assert_close(o, r, TOL[torch.float32], name)
    for name in grads:
        assert grads[name].dtype == inputs[name].to(torch.float32).dtype
        _assert_close(grads[name], ref_grads[name], TOL[torch.float32], f'd{name}')


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
@pytest.mark.parametrize('reverse', [False, True])
def test_low_precision_inputs(dtype, reverse):
    inputs = make_inputs(length=197, groups=2, D='H', z=True, dt_bias=True,
                         initial_states=True, seed=3)
    ours, ref, grads, ref_grads = _run_both(inputs, dtype, 64, reverse, None, True)
    assert ours[0].dtype == dtype and ours[1].dtype == torch.float32
    for name, o, r in zip(('y', 'final_states'), ours, ref):
        _assert_close(o, r, TOL[dtype], name)
    for name in grads:
        assert grads[name].dtype == cast(inputs, dtype)[name].dtype
        _assert_close(grads[name], ref_grads[name], TOL[dtype], f'd{name}')


def test_chunk_size_does_not_change_the_result():
    inputs = cast(make_inputs(length=200, groups=2, D='H', dt_bias=True, initial_states=True,
                              seed=5), torch.float32)
    ref = ssd_scan_naive(**inputs, dt_softplus=True, return_final_states=True)
    for c in (1, 13, 200, 256):
        outs = ssd_scan(**inputs, chunk_size=c, dt_softplus=True, return_final_states=True,
                        impl='torch')
        for o, r in zip(outs, ref):
            _assert_close(o, r, TOL[torch.float32], f'chunk_size={c}')


@pytest.mark.parametrize('reverse', [False, True])
def test_gradcheck_float64(reverse):
    inputs = make_inputs(batch=1, length=9, heads=2, headdim=2, groups=2, dstate=3, D='HP',
                         z=True, dt_bias=True, initial_states=True, seed=7)
    names = list(inputs)
    leaves = [inputs[n].clone().requires_grad_() for n in names]

    def scan(*tensors):
        return ssd_scan(**dict(zip(names, tensors)), chunk_size=4, dt_softplus=True,
                        dt_limit=(0.01, 10.0), return_final_states=True, reverse=reverse,
                        impl='torch')

    assert torch.autograd.gradcheck(scan, leaves, fast_mode=True)


def test_gradcheck_bidirectional_float64():
    fwd = make_inputs(batch=1, length=8, heads=2, headdim=2, groups=1, dstate=3, D='H',
                      dt_bias=True, seed=8)
    bwd = make_inputs(batch=1, length=8, heads=2, headdim=2, groups=1, dstate=3, D='H',
                      dt_bias=True, seed=9)
    names = ['x', 'dt', 'A', 'B', 'C', 'D', 'dt_bias']
    leaves = [t.clone().requires_grad_() for t in [fwd[n] for n in names] + [bwd[n] for n in names]]

    def scan(*tensors):
        pairs = {n: (tensors[i], tensors[i + len(names)]) for i, n in enumerate(names)}
        return ssd_scan_directions(**stacked(**pairs), reverse=BOTH, chunk_size=3,
                                   dt_softplus=True, impl='torch')

    assert torch.autograd.gradcheck(scan, leaves, fast_mode=True)


@pytest.mark.parametrize('length,chunk', [(197, 64), (257, 256)])
def test_bidirectional_matches_two_oracle_scans(length, chunk):
    """Per-direction pairs for x, dt, B, C, D, dt_bias, one A shared by both directions; the
    backward output is the reverse scan in input order, and A's gradient sums both directions."""
    fwd = cast(make_inputs(length=length, D='H', dt_bias=True, z=True, seed=11), torch.float32,
               grad=True)
    bwd = cast(make_inputs(length=length, D='H', dt_bias=True, z=True, seed=12), torch.float32,
               grad=True)
    shared_A = fwd['A']
    pairs = {n: (fwd[n], bwd[n]) for n in fwd if n != 'A'}
    y_fwd, y_bwd = ssd_scan_directions(**stacked(**pairs, A=shared_A), reverse=BOTH,
                                       chunk_size=chunk, dt_softplus=True, impl='torch')
    ref_f = {n: t.detach().double().requires_grad_() for n, t in fwd.items()}
    ref_b = {n: t.detach().double().requires_grad_() for n, t in bwd.items() if n != 'A'}
    r_fwd = ssd_scan_naive(**ref_f, dt_softplus=True)
    r_bwd = ssd_scan_naive(**ref_b, A=ref_f['A'], dt_softplus=True, reverse=True)
    _assert_close(y_fwd, r_fwd, TOL[torch.float32], 'y_fwd')
    _assert_close(y_bwd, r_bwd, TOL[torch.float32], 'y_bwd')
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(r_fwd.shape, generator=gen, dtype=torch.float64) for _ in range(2)]
    leaves = list(fwd.values()) + [bwd[n] for n in pairs]
    ref_leaves = list(ref_f.values()) + [ref_b[n] for n in pairs]
    grads = torch.autograd.grad(weighted_sum((y_fwd, y_bwd), weights), leaves)
    ref_grads = torch.autograd.grad(weighted_sum((r_fwd, r_bwd), weights), ref_leaves)
    for i, (g, r) in enumerate(zip(grads, ref_grads)):
        _assert_close(g, r, TOL[torch.float32], f'grad {i}')


@pytest.mark.parametrize('A_dtype', [torch.float16, torch.bfloat16])
def test_half_precision_A_matches_the_oracle(A_dtype):
    """A in float16 / bfloat16 (a model cast to half): the scan computes in float32 on A's
    values, a head with A = -inf forgets at every step, and dA has A's dtype (float16 A raised
    inside the op: the floor of A, -1e12, is beyond float16's range)."""
    inputs = cast(make_inputs(length=40, D='H', dt_bias=True, initial_states=True, seed=23),
                  torch.float32, grad=True)
    with torch.no_grad():
        inputs['A'] = inputs['A'].to(A_dtype)
        inputs['A'][1] = -math.inf
    inputs['A'].requires_grad_()
    ref_in = {k: v.detach().double().requires_grad_() for k, v in inputs.items()}
    y, final = ssd_scan(**inputs, chunk_size=16, dt_softplus=True, return_final_states=True,
                        impl='torch')
    ref_y, ref_final = ssd_scan_naive(**ref_in, dt_softplus=True, return_final_states=True)
    _assert_close(y, ref_y, TOL[torch.float32], 'y')
    _assert_close(final, ref_final, TOL[torch.float32], 'final_states')
    (y.sum() + final.sum()).backward()
    (ref_y.sum() + ref_final.sum()).backward()
    assert inputs['A'].grad.dtype == A_dtype
    for name in ('x', 'B', 'C', 'D'):
        _assert_close(inputs[name].grad, ref_in[name].grad, TOL[torch.float32], f'd{name}')
    _assert_close(inputs['A'].grad[[0, 2, 3]], ref_in['A'].grad[[0, 2, 3]], TOL[A_dtype], 'dA')


def test_four_directions_with_states_match_four_oracle_scans():
    """K = 4 directions (as a cross-scan passes them), reverse flags (False, True, True, False),
    each with its own initial state, final states and per-channel D, dt shared through a
    stride-0 expansion: y, the final states and every gradient against one float64 recurrence per
    direction (dt's gradient sums the four)."""
    per_direction = [cast(make_inputs(length=45, groups=2, D='HP', z=True, dt_bias=True,
                                      initial_states=True, seed=40 + k), torch.float32)
                     for k in range(4)]
    reverse = (False, True, True, False)
    leaves = {n: torch.stack([d[n] for d in per_direction]).requires_grad_()
              for n in per_direction[0] if n != 'dt'}
    leaves['dt'] = per_direction[0]['dt'].clone().requires_grad_()
    y, final = ssd_scan_directions(**{**leaves, 'dt': leaves['dt'].expand(4, -1, -1, -1)},
                                   reverse=reverse, chunk_size=16, dt_softplus=True,
                                   return_final_states=True, impl='torch')
    assert y.shape == leaves['x'].shape and final.shape == leaves['initial_states'].shape
    refs = {n: t.detach().double().requires_grad_() for n, t in leaves.items()}
    expected = [ssd_scan_naive(**{n: t if n == 'dt' else t[k] for n, t in refs.items()},
                               dt_softplus=True, return_final_states=True, reverse=rev)
                for k, rev in enumerate(reverse)]
    ref_y, ref_final = (torch.stack(t) for t in zip(*expected))
    _assert_close(y, ref_y, TOL[torch.float32], 'y')
    _assert_close(final, ref_final, TOL[torch.float32], 'final_states')
    weights = [torch.randn(t.shape, generator=torch.Generator().manual_seed(k),
                           dtype=torch.float64) for k, t in enumerate((ref_y, ref_final))]
    weighted_sum((y, final), weights).backward()
    weighted_sum((ref_y, ref_final), weights).backward()
    for name, leaf in leaves.items():
        _assert_close(leaf.grad, refs[name].grad, TOL[torch.float32], f'd{name}')


def test_bidirectional_shared_inputs_equal_forward_and_reverse_scans():
    inputs = cast(make_inputs(length=70, groups=2, D='HP', seed=13), torch.float32)
    y_fwd, y_bwd = ssd_scan_directions(**stacked(**inputs), reverse=BOTH, chunk_size=16,
                                       dt_softplus=True)
    ref_fwd = ssd_scan_naive(**inputs, dt_softplus=True)
    ref_bwd = ssd_scan_naive(**inputs, dt_softplus=True, reverse=True)
    _assert_close(y_fwd, ref_fwd, TOL[torch.float32], 'y_fwd')
    _assert_close(y_bwd, ref_bwd, TOL[torch.float32], 'y_bwd')


def test_non_contiguous_inputs():
    """x, B, C, z as column slices of one projection, as a Mamba-2 in_proj produces them."""
    heads, headdim, groups, dstate, length = 4, 3, 2, 5, 33
    gen = torch.Generator().manual_seed(14)
    proj = torch.randn(2, length, 2 * heads * headdim + 2 * groups * dstate, generator=gen)
    x, B, C, z = proj.split([heads * headdim, groups * dstate, groups * dstate,
                             heads * headdim], dim=-1)
    x, z = x.unflatten(-1, (heads, headdim)), z.unflatten(-1, (heads, headdim))
    B, C = B.unflatten(-1, (groups, dstate)), C.unflatten(-1, (groups, dstate))
    dt = torch.randn(2, length, heads, generator=gen) - 2
    A = -torch.rand(heads, generator=gen) * 0.3
    y = ssd_scan(x, dt, A, B, C, chunk_size=8, z=z, dt_softplus=True, impl='torch')
    ref = ssd_scan_naive(x, dt, A, B, C, z=z, dt_softplus=True)
    _assert_close(y, ref, TOL[torch.float32], 'y')


@pytest.mark.parametrize('reverse', [False, True])
def test_mixing_matrix_reproduces_the_scan(reverse):
    inputs = make_inputs(length=23, groups=2, D='H', dt_bias=True, seed=15)
    M = ssd_mixing_matrix(inputs['dt'], inputs['A'], inputs['B'], inputs['C'],
                          dt_bias=inputs['dt_bias'], dt_softplus=True, dt_limit=(0.0, 0.2),
                          reverse=reverse)
    assert M.shape == (2, 4, 23, 23) and M.dtype == torch.float32
    y = torch.einsum('bhij,bjhp->bihp', M.double(), inputs['x'])
    y = y + inputs['x'] * inputs['D'][:, None]
    ref = ssd_scan_naive(**inputs, dt_softplus=True, dt_limit=(0.0, 0.2), reverse=reverse)
    _assert_close(y, ref, 1e-5, 'M x + D x')
    causal = torch.ones(23, 23, dtype=torch.bool)
    outside = ~(causal.triu() if reverse else causal.tril())
    assert (M[..., outside] == 0).all()


def test_double_backward_is_refused():
    """The hand-written backward is not itself differentiable: asking for it must raise."""
    inputs = cast(make_inputs(length=9, seed=16), torch.float64, grad=True)
    y = ssd_scan(**inputs, chunk_size=4, dt_softplus=True, impl='torch')
    (dx, ) = torch.autograd.grad(y.square().sum(), [inputs['x']], create_graph=True)
    with pytest.raises(RuntimeError, match='backward through dinomamba_mm.ssd_scan_backward.* no '
                                           'autograd formula'):
        dx.sum().backward()


@pytest.mark.parametrize('block_bytes', [1, 2**30])
@pytest.mark.parametrize('grad', [False, True])
def test_head_blocks_match_the_oracle(block_bytes, grad, monkeypatch):
    """The (Q, Q) matrices of the diagonal blocks are built a few heads of one row at a time, in
    the forward and again in the backward pass; a 1-byte budget forces one head per block
    (several blocks per group, G = 2, both directions)."""
    monkeypatch.setattr(chunk_stages, 'MASK_BLOCK_BYTES', block_bytes)
    fwd = cast(make_inputs(length=45, heads=4, groups=2, D='HP', dt_bias=True, seed=17),
               torch.float32, grad=grad)
    bwd = cast(make_inputs(length=45, heads=4, groups=2, D='HP', dt_bias=True, seed=18),
               torch.float32, grad=grad)
    refs = [{k: v.detach().double().requires_grad_() for k, v in t.items()} for t in (fwd, bwd)]
    with torch.set_grad_enabled(grad):
        ours = ssd_scan_directions(**stacked(**{n: (fwd[n], bwd[n]) for n in fwd}),
                                   reverse=BOTH, chunk_size=16, dt_softplus=True, impl='torch')
    oracle = (ssd_scan_naive(**refs[0], dt_softplus=True),
              ssd_scan_naive(**refs[1], dt_softplus=True, reverse=True))
    for name, y, y_ref in zip(('y_fwd', 'y_bwd'), ours, oracle):
        _assert_close(y.detach(), y_ref.detach(), TOL[torch.float32], name)
    if not grad:
        return
    weights = [torch.randn(y.shape, generator=torch.Generator().manual_seed(k),
                           dtype=torch.float64) for k, y in enumerate(oracle)]
    weighted_sum(ours, weights).backward()
    weighted_sum(oracle, weights).backward()
    for direction, t, ref in zip(('forward', 'backward'), (fwd, bwd), refs):
        for name in t:
            _assert_close(t[name].grad, ref[name].grad, TOL[torch.float32],
                          f'{direction} d{name}')


def test_backward_saves_only_the_inputs():
    """The torch backend keeps nothing of its own for the backward pass, gated or not (it
    recomputes dt', the running sums, masks, states and the gate's input from the inputs, as
    the Triton one does)."""
    fwd = cast(make_inputs(length=70, heads=4, groups=2, D='H', dt_bias=True, seed=3),
               torch.float32, grad=True)
    bwd = cast(make_inputs(length=70, heads=4, groups=2, D='H', dt_bias=True, seed=4),
               torch.float32, grad=True)
    for gated in (False, True):
        z = torch.randn(fwd['x'].shape) if gated else None
        leaves = {n: t.detach().requires_grad_() for n, t in stacked(
            **{n: (fwd[n], bwd[n]) for n in fwd}, z=z).items() if t is not None}
        inputs = {t.untyped_storage().data_ptr() for t in leaves.values()}
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t,
                                                      lambda t: t):
            ssd_scan_directions(**leaves, reverse=BOTH, chunk_size=16, dt_softplus=True,
                                impl='torch')
        own = [t for t in saved if t.untyped_storage().data_ptr() not in inputs]
        assert own == [], [(tuple(t.shape), t.dtype) for t in own]


def _decay_gradients(inputs, run):
    """Gradients of A, dt and dt_bias from ``run`` on float32 copies and from the oracle and
    the chunked reference on the same values in float64; run(tensors, impl) -> outputs."""
    ours = {k: v.float().requires_grad_() for k, v in inputs.items()}
    refs = [{k: v.float().double().requires_grad_() for k, v in inputs.items()} for _ in range(2)]
    outputs = [run(ours, 'torch'), run(refs[0], 'naive'), run(refs[1], 'reference')]
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(o.shape, generator=gen, dtype=torch.float64) for o in outputs[0]]
    for out in outputs:
        weighted_sum(out, weights).backward()
    return [{n: t[n].grad for n in ('A', 'dt', 'dt_bias')} for t in (ours, *refs)]


@pytest.mark.parametrize('dt_scale', [1, 2, 4, 8])
@pytest.mark.parametrize('length,chunk', [(130, 256), (130, 64), (64, 16)])
@pytest.mark.parametrize('reverse', [False, True])
def test_decay_gradients_under_strong_decay(dt_scale, length, chunk, reverse):
    inputs = strong_decay_inputs(dt_scale, length=length, seed=dt_scale)

    def run(t, impl):
        kwargs = dict(dt_softplus=True, reverse=reverse)
        if impl == 'naive':
            return (ssd_scan_naive(**t, **kwargs), )
        if impl == 'reference':
            return (ssd_chunked_reference(**t, chunk_size=chunk, **kwargs), )
        return (ssd_scan(**t, chunk_size=chunk, impl=impl, **kwargs), )

    ours, oracle, reference = _decay_gradients(inputs, run)
    for name in ours:
        assert relative_error(reference[name], oracle[name]) <= 1e-9, name
        err = relative_error(ours[name], oracle[name])
        assert err <= 1e-4, f'd{name}: relative error {err:.2e}'


@pytest.mark.parametrize('dt_scale,chunk', [(8, 256), (4, 64), (2, 16)])
def test_bidirectional_decay_gradients_under_strong_decay(dt_scale, chunk):
    """Both directions share dt, A and dt_bias (A's gradient sums both)."""
    inputs = strong_decay_inputs(dt_scale, seed=10 + dt_scale)

    def run(t, impl):
        if impl == 'torch':
            return ssd_scan_directions(**stacked(**t), reverse=BOTH, chunk_size=chunk,
                                       dt_softplus=True, impl='torch')
        scan = ssd_scan_naive if impl == 'naive' else functools.partial(
            ssd_chunked_reference, chunk_size=chunk)
        return tuple(scan(**t, dt_softplus=True, reverse=rev) for rev in (False, True))

    ours, oracle, reference = _decay_gradients(inputs, run)
    for name in ours:
        assert relative_error(reference[name], oracle[name]) <= 1e-9, name
        err = relative_error(ours[name], oracle[name])
        assert err <= 1e-4, f'd{name}: relative error {err:.2e}'


@pytest.mark.parametrize('reverse,nan_x,dt_limit', [(False, True, None), (True, True, None),
                                                   (False, False, (0.01, 5.0))])
def test_nan_in_dt_does_not_reach_earlier_tokens(reverse, nan_x, dt_limit):
    """dt NaN at token t (and x, as for a NaN token): the outputs before t in scan order equal
    the oracle's on the finite prefix, those from t on and the final state are NaN, as in the
    recurrence (the chunk of t has tokens on both sides)."""
    length, t = 40, 21
    inputs = cast(make_inputs(length=length, D='H', dt_bias=True, seed=19), torch.float32)
    bad = length - 1 - t if reverse else t
    inputs['dt'][:, bad] = float('nan')
    if nan_x:
        inputs['x'][:, bad] = float('nan')
    kwargs = dict(dt_softplus=True, reverse=reverse, dt_limit=dt_limit or (0.0, float('inf')))
    y, final = ssd_scan(**inputs, chunk_size=32, return_final_states=True, impl='torch', **kwargs)
    before = slice(bad + 1, None) if reverse else slice(0, bad)
    after = slice(0, bad + 1) if reverse else slice(bad, None)
    prefix = {k: v[:, before] if k in ('x', 'dt', 'B', 'C') else v for k, v in inputs.items()}
    _assert_close(y[:, before], ssd_scan_naive(**prefix, **kwargs), TOL[torch.float32], 'y')
    assert torch.isnan(y[:, after]).all() and torch.isnan(final).all()


@pytest.mark.parametrize('reverse', [False, True])
def test_growing_heads_match_the_oracle(reverse):
    """Heads with A > 0 (a state that grows: the masks then zero their non-causal side before
    the exp instead of clamping it) next to decaying ones, outputs and gradients."""
    inputs = make_inputs(length=40, heads=4, D='H', dt_bias=True, initial_states=True, seed=21,
                         A_range=(-0.2, 0.2))
    assert (inputs['A'] > 0).any() and (inputs['A'] < 0).any()
    ours, ref, grads, ref_grads = _run_both(inputs, torch.float32, 16, reverse, None, True)
    for name, o, r in zip(('y', 'final_states'), ours, ref):
        _assert_close(o, r, TOL[torch.float32], name)
    for name in grads:
        _assert_close(grads[name], ref_grads[name], TOL[torch.float32], f'd{name}')
