"""impl='mamba_ssm' (mamba_ssm's own kernels as a backend of the op, ops/ssd/mamba_ssm_chunk.py)
under Triton's interpreter on CPU: y, the final states and every gradient against the float64
oracle and against our torch and Triton paths, one direction and two stacked ones (the reverse
one through flips), with initial and final states, gate, D per head and per channel, fp32 and
bf16; and its refusal of CPU tensors outside the interpreter.

Each case runs in a fresh Python started with TRITON_INTERPRET=1 (see mamba_ssm_shims.py); bf16
runs through test_ssd_triton's ``_gpu_products``, which makes the interpreter's tl.dot take bf16
operands as a GPU does, for all three. Errors relative to max(1, max |reference|).
"""
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip('triton')
pytest.importorskip('einops')  # mamba_ssm's Triton ops import it

CASES = {  # dtype, reverse flags, gate, D, groups, dt_limit, chunk_size, tolerance
    'fp32-single-reverse': ('float32', (True, ), True, 'HP', 2, None, 16, 1e-4),
    'fp32-bidirectional': ('float32', (False, True), False, 'H', 1, None, 32, 1e-4),
    'fp32-bidirectional-gate': ('float32', (False, True), True, 'HP', 2, (0.0, 0.3), 16, 1e-4),
    'bf16-bidirectional': ('bfloat16', (False, True), False, 'H', 1, None, 32, 3e-2),
}


def _run_case(case: str, interpret: bool) -> str:
    env = dict(os.environ)
    env.pop('TRITON_INTERPRET', None)
    if interpret:
        env['TRITON_INTERPRET'] = '1'
    result = subprocess.run([sys.executable, __file__, case], env=env, capture_output=True,
                            text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


@pytest.mark.parametrize('case', CASES)
def test_matches_the_oracle_and_our_paths(case):
    """Observed: fp32 <= 8e-7 against the oracle and both paths; bf16 <= 1.3e-2."""
    print(_run_case(case, interpret=True))


def test_cpu_tensors_are_refused_outside_the_interpreter():
    assert 'refused' in _run_case('cpu-refused', interpret=False)


def test_bf16_is_refused_by_the_interpreter():
    """The interpreter's tl.dot multiplies bf16 bit patterns as integers: an error, not a
    wrong result."""
    assert 'refused' in _run_case('bf16-refused', interpret=True)


def _inputs(dtype, reverse, gate, D, groups, seed=0):
    """Stacked leaves (K, ...) of one direction's inputs per flag; dt shared by the directions
    through an expansion when there are two; activations in ``dtype``."""
    from ssd_cases import cast, make_inputs
    per_direction = [cast(make_inputs(batch=2, length=40, heads=2, headdim=16, groups=groups,
                                      dstate=16, D=D, z=gate, dt_bias=True, initial_states=True,
                                      seed=seed + k), dtype)
                     for k in range(len(reverse))]
    leaves = {n: torch.stack([d[n] for d in per_direction]).detach().requires_grad_()
              for n in per_direction[0] if n != 'dt'}
    leaves['dt'] = per_direction[0]['dt'].detach().requires_grad_()
    return leaves


def _outputs_and_grads(leaves, reverse, dt_limit, chunk, impl):
    from dinomamba_mm.ops.ssd import ssd_scan_directions
    from dinomamba_mm.ops.ssd.naive import ssd_scan_naive
    given = {n: t.detach().clone().requires_grad_() for n, t in leaves.items()}
    limit = dt_limit or (0.0, float('inf'))
    if impl == 'oracle':
        ref = {n: t.double() for n, t in given.items()}
        outs = [torch.stack(o) for o in zip(*(
            ssd_scan_naive(**{n: t if n == 'dt' else t[k] for n, t in ref.items()},
                           dt_softplus=True, dt_limit=limit, return_final_states=True,
                           reverse=rev) for k, rev in enumerate(reverse)))]
    else:
        dt = given['dt'].expand(len(reverse), *given['dt'].shape)
        outs = ssd_scan_directions(**{**given, 'dt': dt}, reverse=reverse, chunk_size=chunk,
                                   dt_softplus=True, dt_limit=limit, return_final_states=True,
                                   impl=impl)
    gen = torch.Generator().manual_seed(1)
    weights = [torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.dtype).double()
               for o in outs]
    sum((o.double() * w).sum() for o, w in zip(outs, weights)).backward()
    return {**{name: o.detach() for name, o in zip(('y', 'final_states'), outs)},
            **{f'd{n}': t.grad for n, t in given.items()}}


def _compare(case: str) -> None:
    import mamba_ssm_shims
    import test_ssd_triton as ours_tests  # defines our kernels under the interpreter

    from dinomamba_mm.ops.ssd import mamba_ssm_chunk
    dtype, reverse, gate, D, groups, dt_limit, chunk, tol = CASES[case]
    mamba_ssm_shims.ssd_combined()
    leaves = _inputs(getattr(torch, dtype), reverse, gate, D, groups)
    calls = []
    forward_call = mamba_ssm_chunk._forward_call
    mamba_ssm_chunk._forward_call = lambda *args: calls.append(1) or forward_call(*args)
    device = mamba_ssm_chunk._device
    if dtype == 'bfloat16':  # the bf16 refusal lifted, as _gpu_products does for ours
        mamba_ssm_chunk._device = lambda inp: mamba_ssm_chunk.kernels()
    with ours_tests._gpu_products(), mamba_ssm_shims.cpu_device_context():
        theirs = _outputs_and_grads(leaves, reverse, dt_limit, chunk, 'mamba_ssm')
        # the backward reads the kept output unless there is a gate (then it recomputes it)
        assert len(calls) == len(reverse) * (2 if gate else 1), calls
        found = {impl: _outputs_and_grads(leaves, reverse, dt_limit, chunk, impl)
                 for impl in ('oracle', 'torch', 'triton')}
    mamba_ssm_chunk._device = device
    assert theirs['y'].dtype == getattr(torch, dtype)
    assert theirs['final_states'].dtype == torch.float32
    for impl, ref in found.items():
        for name, expected in ref.items():
            expected = expected.double()
            assert theirs[name].shape == expected.shape, name
            if name.startswith('d'):  # a gradient has its input's dtype
                assert theirs[name].dtype == leaves[name[1:]].dtype, name
            error = (theirs[name].double() - expected).abs().max().item() / max(
                1.0, expected.abs().max().item())
            print(f'{case} {name} against {impl}: {error:.2e}')
            assert error <= tol, f'{case} {name} against {impl}: {error:.2e} > {tol:g}'


REFUSALS = {  # dtype, what the error says
    'cpu-refused': ('float32', "impl='mamba_ssm' runs mamba_ssm's Triton kernels, which need CUDA "
                               "tensors: x is on cpu. Move the tensors to a CUDA device, or pass "
                               "impl='torch'"),
    'bf16-refused': ('bfloat16', 'x has dtype torch.bfloat16, which the Triton interpreter '
                                 r'\(TRITON_INTERPRET=1\) cannot compute on CPU'),
}


def _refuse(case: str) -> None:
    import mamba_ssm_shims

    from dinomamba_mm.ops.ssd import ssd_scan
    dtype, pattern = REFUSALS[case]
    mamba_ssm_shims.enter_without_extension()
    leaves = _inputs(getattr(torch, dtype), (False, ), False, 'H', 1)
    with pytest.raises(ValueError, match=pattern):
        ssd_scan(**{n: t if n == 'dt' else t[0] for n, t in leaves.items()}, impl='mamba_ssm')
    print('refused')


if __name__ == '__main__':
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    (_refuse if sys.argv[1] in REFUSALS else _compare)(sys.argv[1])
