"""Our Triton scan beside mamba_ssm's (``mamba_chunk_scan_combined``), both under Triton's
interpreter on CPU: outputs, final states and every gradient, single and bidirectional (mamba_ssm
on flipped inputs for the reverse direction), strong decay, fp32 and bf16.

mamba_ssm's ops run here through the shims of mamba_ssm_shims.py, each case in a fresh Python
started with TRITON_INTERPRET=1. bf16 runs through test_ssd_triton's ``_gpu_products``, which
makes the interpreter's tl.dot take bf16 operands as a GPU does, for both ops.
"""
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip('triton')
pytest.importorskip('einops')  # mamba_ssm's Triton ops import it


ARGS = ('x', 'dt', 'A', 'B', 'C')


def _inputs(dtype, strong, seed=0, length=70, heads=2):
    from ssd_cases import strong_decay_inputs
    if strong:
        t = strong_decay_inputs(8, length=length, heads=heads, seed=seed)
        t['z'] = torch.randn_like(t['x'])
    else:
        import test_ssd_triton as ours_tests
        t = {k: v.double() if v is not None else None for k, v in ours_tests._inputs(
            1, length, heads, 1, torch.float32, seed, True, 'H', True, True).items()}
    return {k: (v.to(dtype) if k in ('x', 'B', 'C', 'z') else v.float()).requires_grad_()
            for k, v in t.items() if v is not None}


def _ours(t, bidirectional, chunk):
    from dinomamba_mm.ops.ssd import ssd_scan, ssd_scan_directions
    from ssd_cases import stacked
    kw = dict(chunk_size=chunk, dt_softplus=True, impl='triton')
    if bidirectional:
        return ssd_scan_directions(**stacked(**t), reverse=(False, True), **kw)
    return ssd_scan(**t, return_final_states=True, **kw)


def _theirs(t, bidirectional, chunk):
    import mamba_ssm_shims
    mamba_chunk_scan_combined = mamba_ssm_shims.ssd_combined().mamba_chunk_scan_combined
    kw = dict(D=t['D'], dt_bias=t['dt_bias'], dt_softplus=True)
    if bidirectional:
        flip = {n: t[n].flip(1) for n in ('x', 'dt', 'B', 'C', 'z')}
        y_f = mamba_chunk_scan_combined(*(t[n] for n in ARGS), chunk, z=t['z'], **kw)
        y_b = mamba_chunk_scan_combined(flip['x'], flip['dt'], t['A'], flip['B'], flip['C'],
                                        chunk, z=flip['z'], **kw).flip(1)
        return y_f, y_b
    return mamba_chunk_scan_combined(*(t[n] for n in ARGS), chunk, z=t['z'],
                                     return_final_states=True, **kw)


def _outputs_and_grads(run, inputs, bidirectional, chunk):
    leaves = {k: v.detach().clone().requires_grad_() for k, v in inputs.items()}
    outs = run(leaves, bidirectional, chunk)
    gen = torch.Generator().manual_seed(1)
    loss = sum((o.double() * torch.randn(o.shape, generator=gen, dtype=torch.float64)).sum()
               for o in outs)  # y and, single-direction, the final state
    loss.backward()
    return {**{f'out{k}': o.detach() for k, o in enumerate(outs)},
            **{f'd{k}': v.grad for k, v in leaves.items()}}


CASES = {  # dtype, strong decay, bidirectional, chunk_size, tolerance
    'fp32': ('float32', False, False, 16, 1e-5),
    'fp32-bidirectional': ('float32', False, True, 32, 1e-5),
    'fp32-strong-decay': ('float32', True, False, 64, 1e-5),
    'fp32-strong-decay-bidirectional': ('float32', True, True, 64, 1e-5),
    'bf16-bidirectional': ('bfloat16', False, True, 32, 2e-2),
}


@pytest.mark.parametrize('case', CASES)
def test_matches_mamba_chunk_scan_combined(case):
    """Every output and gradient of ours within the case's tolerance of mamba_ssm's, relative to
    max(1, max |theirs|) (observed: fp32 <= 5e-7, bf16 <= 8.6e-3: the two round different
    intermediates to bf16)."""
    env = dict(os.environ, TRITON_INTERPRET='1')
    result = subprocess.run([sys.executable, __file__, case], env=env, capture_output=True,
                            text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def _compare(case: str) -> None:
    import test_ssd_triton as ours_tests  # defines our kernels under the interpreter
    dtype, strong, bidirectional, chunk, tol = CASES[case]
    inputs = _inputs(getattr(torch, dtype), strong)
    import mamba_ssm_shims
    with ours_tests._gpu_products(), mamba_ssm_shims.cpu_device_context():
        ours = _outputs_and_grads(_ours, inputs, bidirectional, chunk)
        theirs = _outputs_and_grads(_theirs, inputs, bidirectional, chunk)
    assert ours.keys() == theirs.keys()
    for name in ours:
        theirs_ = theirs[name].double()
        error = (ours[name].double() - theirs_).abs().max().item() / max(
            1.0, theirs_.abs().max().item())
        print(f'{case} {name}: {error:.2e}')
        assert error <= tol, f'{case} {name}: {error:.2e} > {tol:g}'


if __name__ == '__main__':
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    _compare(sys.argv[1])
