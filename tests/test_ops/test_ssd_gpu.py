"""The Triton SSD scan on a GPU: against the PyTorch path, the float64 oracle and mamba_ssm
(also as the op's 'mamba_ssm' backend against the oracle).

``pytest -m gpu tests/test_ops/test_ssd_gpu.py`` on a CUDA machine (``tools/benchmarks/
gpu_check.py`` runs it); without CUDA every case is skipped (the same kernels run on CPU under
Triton's interpreter in test_ssd_triton.py and test_ssd_triton_vs_mamba_ssm.py). Inputs are a
DinoVim-B mixer's (H 24, P 64, N 64, different values per direction). Errors are max |a - b| /
max(1, max |b|): fp32 2e-3 (the kernels multiply fp32 in TF32 on a GPU), bf16 6e-2. Strong decay:
the gradients of A, dt and dt_bias / their largest magnitude, 1e-4 on the PyTorch path; on the
Triton one (TF32) 6e-2 (dA), 2e-3 (ddt) and 1e-2 (d dt_bias, a sum over every token whose terms
cancel: with TF32 products emulated on CPU, 2.9e-3 here for dt_scale 2, forward; 6.4e-3 in one of
test_ssd_triton's 14 draws of test_fp32_error_with_tf32_products).

``DINOMAMBA_SSD_TEST_DEVICE=cpu`` with ``TRITON_INTERPRET=1`` runs the same cases on CPU under
Triton's interpreter at small shapes (H 2, P = N = 16, L 1 and 65), its products made a GPU's
(test_ssd_triton's ``_gpu_products``: bf16 operands, fp32 rounded to TF32) and mamba_ssm launched
there (test_ssd_triton_vs_mamba_ssm's shims): the rehearsal of this module's code that
``tools/benchmarks/gpu_check.py --device cpu --tiny`` runs before a GPU does.
"""
import importlib
import importlib.util
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ssd_cases import decay_gradient_errors, stacked, strong_decay_inputs  # noqa: E402

DEVICE = os.environ.get('DINOMAMBA_SSD_TEST_DEVICE', 'cuda')
INTERPRETED = DEVICE == 'cpu'
if INTERPRETED:
    reason = 'DINOMAMBA_SSD_TEST_DEVICE=cpu needs TRITON_INTERPRET=1 from the start'
    runnable = os.environ.get('TRITON_INTERPRET') == '1'
else:
    reason, runnable = 'needs a CUDA device', torch.cuda.is_available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not runnable, reason=reason)]

LENGTHS = (1, 65) if INTERPRETED else (1, 63, 64, 65, 197, 1025, 4096, 16384)
BATCH, HEADS, WIDTH = (1, 2, 16) if INTERPRETED else (8, 24, 64)  # WIDTH: P = N
TOLERANCE = {torch.float32: 2e-3, torch.bfloat16: 6e-2}
NAMES = ('x', 'dt', 'A', 'B', 'C', 'D', 'z', 'dt_bias')


@pytest.fixture(scope='module', autouse=True)
def kernels_for_the_device():
    """The kernels compiled for the GPU, also when an interpreter test module defined them
    under TRITON_INTERPRET=1 during collection; on CPU, interpreted, with a GPU's products and
    mamba_ssm's launch context."""
    kernels = importlib.import_module('dinomamba_mm.ops.ssd.triton_kernels')
    if kernels.INTERPRETING != (os.environ.get('TRITON_INTERPRET') == '1'):
        importlib.reload(kernels)
    assert kernels.INTERPRETING == INTERPRETED, (
        'set TRITON_INTERPRET=1 exactly when DINOMAMBA_SSD_TEST_DEVICE is cpu')
    if not INTERPRETED:
        yield
        return
    from test_ssd_triton import _gpu_products
    import mamba_ssm_shims
    with _gpu_products(tf32=True), mamba_ssm_shims.cpu_device_context():
        yield


def vision_inputs(batch: int, length: int, dtype: torch.dtype, seed: int, heads: int = HEADS):
    """{name: (forward value, backward value)} on DEVICE; activations in ``dtype``."""
    g = torch.Generator(device=DEVICE).manual_seed(seed)

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, device=DEVICE, generator=g) * scale

    def one():
        return dict(x=randn(batch, length, heads, WIDTH).to(dtype),
                    dt=randn(batch, length, heads, scale=0.5),
                    A=-torch.exp(torch.rand(heads, device=DEVICE, generator=g) * 2.7),
                    B=randn(batch, length, 1, WIDTH, scale=0.3).to(dtype),
                    C=randn(batch, length, 1, WIDTH, scale=0.3).to(dtype), D=randn(heads),
                    z=randn(batch, length, heads, WIDTH).to(dtype),
                    dt_bias=randn(heads) * 0.5 - 4)

    fwd, bwd = one(), one()
    return {n: (fwd[n], bwd[n]) for n in NAMES}


def scan(inputs, impl: str, bidirectional: bool, oracle: bool = False) -> dict:
    """Outputs and every input's gradient under fixed random output gradients; the oracle runs
    ``ssd_scan_naive`` per direction in float64."""
    from dinomamba_mm.ops.ssd import ssd_scan, ssd_scan_directions
    from dinomamba_mm.ops.ssd.naive import ssd_scan_naive
    directions = 2 if bidirectional else 1
    leaves = {n: [(t.double() if oracle else t).detach().clone().requires_grad_()
                  for t in pair[:directions]] for n, pair in inputs.items()}
    args = [{n: leaves[n][k] for n in NAMES} for k in range(directions)]
    if oracle:
        ys = [ssd_scan_naive(**a, dt_softplus=True, reverse=bool(k)) for k, a in enumerate(args)]
    elif bidirectional:
        ys = ssd_scan_directions(**stacked(**leaves), reverse=(False, True), chunk_size=64,
                                 dt_softplus=True, impl=impl)
    else:
        ys = [ssd_scan(**args[0], chunk_size=64, dt_softplus=True, impl=impl)]
    g = torch.Generator(device=DEVICE).manual_seed(0)
    cotangents = [torch.randn(y.shape, device=DEVICE, generator=g).to(inputs['x'][0].dtype)
                  .to(y.dtype) for y in ys]
    torch.autograd.backward(list(ys), cotangents)
    return {**{f'y[{k}]': y.detach() for k, y in enumerate(ys)},
            **{f'd{n}[{k}]': leaves[n][k].grad for n in NAMES for k in range(directions)}}


def errors(got: dict, ref: dict) -> dict:
    return {k: ((got[k].double() - ref[k].double()).abs().max()
                / ref[k].double().abs().max().clamp(min=1.0)).item() for k in ref}


@pytest.mark.parametrize('bidirectional', [False, True], ids=['single', 'bidirectional'])
@pytest.mark.parametrize('length', LENGTHS)
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16], ids=['fp32', 'bf16'])
def test_triton_matches_the_torch_path(dtype, length, bidirectional):
    inputs = vision_inputs(2 if length > 4096 else BATCH, length, dtype, seed=length)
    got = scan(inputs, 'triton', bidirectional)
    assert all(torch.isfinite(t).all() for t in got.values())
    found = errors(got, scan(inputs, 'torch', bidirectional))
    assert max(found.values()) <= TOLERANCE[dtype], found


@pytest.fixture
def mamba_ssm_importable():
    """mamba_ssm's ops importable without its CUDA extension, decided afresh by the op."""
    from dinomamba_mm.ops.ssd import api
    if importlib.util.find_spec('mamba_ssm') is None:
        pytest.skip('mamba_ssm is not installed')
    import mamba_ssm_shims
    mamba_ssm_shims.enter_without_extension()
    api._mamba_ssm_unusable.cache_clear()


# the op refuses impl='mamba_ssm' on CPU tensors: test_ssd_mamba_ssm.py runs that backend
# under the interpreter
@pytest.mark.parametrize('impl', ['triton', 'torch'] + ([] if INTERPRETED else ['mamba_ssm']))
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16], ids=['fp32', 'bf16'])
def test_both_paths_match_the_oracle(dtype, impl, request):
    if impl == 'mamba_ssm':
        request.getfixturevalue('mamba_ssm_importable')
    inputs = vision_inputs(1, 65 if INTERPRETED else 197, dtype, seed=1, heads=min(HEADS, 4))
    found = errors(scan(inputs, impl, True), scan(inputs, impl, True, oracle=True))
    assert max(found.values()) <= TOLERANCE[dtype], found


@pytest.mark.parametrize('mode', ['forward', 'reverse', 'bidirectional'])
@pytest.mark.parametrize('impl', ['triton', 'torch'])
@pytest.mark.parametrize('dt_scale', [2, 8])
def test_decay_gradients_under_strong_decay(dt_scale, impl, mode):
    from dinomamba_mm.ops.ssd import ssd_scan, ssd_scan_directions

    def scan(ours, mode):
        if mode == 'bidirectional':
            return ssd_scan_directions(**stacked(**ours), reverse=(False, True), chunk_size=64,
                                       dt_softplus=True, impl=impl)
        return ssd_scan(**ours, chunk_size=64, dt_softplus=True, reverse=mode == 'reverse',
                        return_final_states=True, impl=impl)

    small = dict(length=65, heads=2) if INTERPRETED else {}
    inputs = {k: v.to(DEVICE)
              for k, v in strong_decay_inputs(dt_scale, seed=dt_scale, **small).items()}
    for name, error in decay_gradient_errors(inputs, mode, scan).items():
        tolerance = 1e-4 if impl == 'torch' else {'A': 6e-2, 'dt': 2e-3, 'dt_bias': 1e-2}[name]
        assert error <= tolerance, (name, error)


@pytest.mark.parametrize('length', (65, ) if INTERPRETED else (197, 1025, 4096))
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16], ids=['fp32', 'bf16'])
def test_matches_mamba_chunk_scan_combined(dtype, length):
    if importlib.util.find_spec('mamba_ssm') is None:
        pytest.skip('mamba_ssm is not installed')
    import mamba_ssm_shims  # its __init__ imports a CUDA extension a Python-only install skips
    mamba_ssm_shims.enter_without_extension()
    combined = importlib.import_module('mamba_ssm.ops.triton.ssd_combined')
    if INTERPRETED:  # its autotuners would time every config with CUDA events: one config each
        mamba_ssm_shims.ssd_combined()
    inputs = vision_inputs(BATCH, length, dtype, seed=length)
    ours = scan(inputs, 'triton', False)
    leaves = {n: inputs[n][0].detach().clone().requires_grad_() for n in NAMES}
    y = combined.mamba_chunk_scan_combined(*(leaves[n] for n in NAMES[:5]), 64, D=leaves['D'],
                                           z=leaves['z'], dt_bias=leaves['dt_bias'],
                                           dt_softplus=True)
    g = torch.Generator(device=DEVICE).manual_seed(0)
    y.backward(torch.randn(y.shape, device=DEVICE, generator=g).to(dtype))
    theirs = {'y[0]': y.detach(), **{f'd{n}[0]': leaves[n].grad for n in NAMES}}
    found = errors(ours, theirs)
    assert max(found.values()) <= TOLERANCE[dtype], found
