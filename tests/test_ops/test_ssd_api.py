"""ssd_scan / ssd_scan_directions / ssd_mixing_matrix: input validation and dispatch."""
import os
import sys
import warnings

import pytest
import torch

from dinomamba_mm.ops.ssd import api, ssd_mixing_matrix, ssd_scan, ssd_scan_directions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ssd_cases import cast, make_inputs  # noqa: E402


@pytest.fixture
def inputs():
    return cast(make_inputs(batch=2, length=6, heads=4, headdim=3, groups=2, dstate=5, D='H',
                            z=True, dt_bias=True, initial_states=True), torch.float32)


def _bad(inputs, **changes):
    return {**inputs, **changes}


def _stacked(inputs, directions=2):
    """Each input as a stack of ``directions`` copies (one direction's values, repeated)."""
    return {k: torch.stack([v] * directions) for k, v in inputs.items()}


@pytest.mark.parametrize('name,value,pattern', [
    ('x', torch.zeros(2, 6, 4), r'x must have shape \(B, L, H, P\).*got shape \(2, 6, 4\)'),
    ('dt', torch.zeros(2, 6, 3), r'dt must have shape \(B, L, H\) = \(2, 6, 4\), got \(2, 6, 3\)'),
    ('A', torch.zeros(4, 1), r'A must have shape \(H,\).*got shape \(4, 1\)'),
    ('A', torch.zeros(3), r'A must have shape \(H,\) = \(4,\), got \(3,\)'),
    ('B', torch.zeros(2, 5, 2, 5), r'B must have shape \(B, L, G, N\) with \(B, L\) = \(2, 6\)'),
    ('B', torch.zeros(2, 6, 3, 5), r'H = 4 .* multiple of the number of groups G = 3'),
    ('C', torch.zeros(2, 6, 2, 4), r'C must have shape \(B, L, G, N\) as B = \(2, 6, 2, 5\)'),
    ('D', torch.zeros(3), r'D must have shape \(H,\) = \(4,\) or \(H, P\) = \(4, 3\), got \(3,\)'),
    ('D', torch.zeros(4, 3, 1), r'D must have shape \(H,\) or \(H, P\), got \(4, 3, 1\)'),
    ('z', torch.zeros(2, 6, 4, 2), r'z must have shape \(B, L, H, P\) as x = \(2, 6, 4, 3\)'),
    ('dt_bias', torch.zeros(5), r'dt_bias must have shape \(H,\) = \(4,\), got \(5,\)'),
    ('initial_states', torch.zeros(2, 4, 3, 4),
     r'initial_states must have shape \(B, H, P, N\) = \(2, 4, 3, 5\), got \(2, 4, 3, 4\)'),
    ('B', torch.zeros(2, 6, 2, 5, dtype=torch.float64),
     r'B has dtype torch.float64 but x has torch.float32'),
    ('z', torch.zeros(2, 6, 4, 3, dtype=torch.bfloat16),
     r'z has dtype torch.bfloat16 but x has torch.float32'),
    ('dt', torch.zeros(2, 6, 4, dtype=torch.int64), r'dt must be a floating point tensor'),
    ('x', torch.zeros(2, 6, 4, 3, device='meta'), r'dt is on device cpu but x is on meta'),
])
def test_bad_tensor_raises_value_error(inputs, name, value, pattern):
    with pytest.raises(ValueError, match=pattern):
        ssd_scan(**_bad(inputs, **{name: value}))


def test_unsupported_dtype_or_layout_is_named(inputs):
    """float8 or sparse tensors: an error naming the argument and what the scan takes (float8
    failed inside the op on a dtype promotion, a sparse x on an internal assert of torch)."""
    float8 = {n: inputs[n].to(torch.float8_e4m3fn) for n in ('x', 'B', 'C', 'z')}
    with pytest.raises(ValueError, match=r'x must be a floating point tensor of dtype float16, '
                                         r'bfloat16, float32 or float64, got dtype '
                                         r'torch.float8_e4m3fn'):
        ssd_scan(**_bad(inputs, **float8))
    with pytest.raises(ValueError, match=r'x must be a dense \(strided\) tensor, got layout '
                                         r'torch.sparse_coo: convert it with .to_dense\(\)'):
        ssd_scan(**_bad(inputs, x=inputs['x'].to_sparse()))


def test_non_tensor_raises_type_error(inputs):
    with pytest.raises(TypeError, match='x must be a torch.Tensor of shape .* got list'):
        ssd_scan(**_bad(inputs, x=[[1.0]]))


@pytest.mark.parametrize('kwargs,pattern', [
    (dict(chunk_size=0), 'chunk_size must be a positive int, got 0'),
    (dict(chunk_size=-4), 'chunk_size must be a positive int, got -4'),
    (dict(chunk_size=2.5), 'chunk_size must be a positive int, got 2.5'),
    (dict(dt_limit=(0.5, 0.1)), r'dt_limit must satisfy 0 <= min <= max, got \(0.5, 0.1\)'),
    (dict(dt_limit=(-1.0, 1.0)), r'dt_limit must satisfy 0 <= min <= max, got \(-1.0, 1.0\)'),
    (dict(dt_limit=(0.0, float('nan'))), 'dt_limit must satisfy 0 <= min <= max'),
    (dict(dt_limit=0.1), 'dt_limit must be a pair'),
    (dict(dt_limit=(0.1, 0.2, 0.3)), 'dt_limit must be a pair'),
    (dict(impl='cuda'), "impl must be one of None, 'auto', 'torch', 'triton', 'mamba_ssm', "
                        "got 'cuda'"),
])
def test_bad_option_raises_value_error(inputs, kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        ssd_scan(**inputs, **kwargs)


def test_empty_sequence_raises(inputs):
    empty = cast(make_inputs(length=0, groups=2), torch.float32)
    with pytest.raises(ValueError, match=r'x must hold at least one token, got shape'):
        ssd_scan(**empty)


@pytest.fixture
def fresh_environment():
    """DINOMAMBA_SSD_IMPL is read once: forget the value read before and after the test."""
    api._environment_impl.cache_clear()
    yield
    api._environment_impl.cache_clear()


def test_bad_environment_variable(inputs, monkeypatch, fresh_environment):
    monkeypatch.setenv(api.ENV_IMPL, 'fast')
    with pytest.raises(ValueError, match="environment variable DINOMAMBA_SSD_IMPL must be one "
                                         "of .* got 'fast'"):
        ssd_scan(**inputs)


def test_empty_batch_gives_empty_outputs_and_gradients():
    """B = 0 (an empty batch): empty outputs, gradients of the inputs' shapes (zero for the
    per-head parameters), for both entry points."""
    empty = cast(make_inputs(batch=0, length=7, groups=2, D='H', z=True, dt_bias=True,
                             initial_states=True), torch.float32, grad=True)
    y, final = ssd_scan(**empty, dt_softplus=True, return_final_states=True)
    assert y.shape == (0, 7, 4, 3) and final.shape == (0, 4, 3, 5)
    (y.sum() + final.sum()).backward()
    y, final = ssd_scan_directions(**_stacked(empty), reverse=(False, True), dt_softplus=True,
                                   return_final_states=True)
    assert y.shape == (2, 0, 7, 4, 3) and final.shape == (2, 0, 4, 3, 5)
    (y.sum() + final.sum()).backward()
    for name, leaf in empty.items():
        assert leaf.grad is not None and leaf.grad.shape == leaf.shape, name
        assert not leaf.grad.any(), name


@pytest.mark.parametrize('sizes,pattern', [
    (dict(heads=0), r'x must have at least one head \(H > 0\) .* x has shape \(B, L, H, P\) = '
                    r'\(2, 6, 0, 3\)'),
    (dict(headdim=0), r'x must have at least one head \(H > 0\) of at least one channel '
                      r'\(P > 0\)'),
    (dict(dstate=0), r'B must have a state size N > 0: B has shape \(B, L, G, N\) = '
                     r'\(2, 6, 1, 0\)'),
])
def test_empty_heads_or_state_raise(sizes, pattern):
    bad = cast(make_inputs(batch=2, length=6, **sizes), torch.float32)
    with pytest.raises(ValueError, match=pattern):
        ssd_scan(**bad)


@pytest.mark.parametrize('name,value,pattern', [
    ('x', torch.zeros(2, 6, 4, 3), r'x must have shape \(K, B, L, H, P\) \(5 dims\), got shape '
                                   r'\(2, 6, 4, 3\)'),
    ('x', torch.zeros(0, 2, 6, 4, 3), r'x must hold at least one direction \(K > 0\)'),
    ('dt', torch.zeros(2, 2, 6, 3), r'dt must have shape \(K, B, L, H\) = \(2, 2, 6, 4\), got '
                                    r'\(2, 2, 6, 3\)'),
    ('dt', torch.zeros(3, 2, 6, 4), r'dt must have shape \(K, B, L, H\) = \(2, 2, 6, 4\)'),
    ('A', torch.zeros(4), r'A must have shape \(K, H\) \(2 dims\)'),
    ('A', torch.zeros(1, 4), r'A must have shape \(K, H\) = \(2, 4\), got \(1, 4\)'),
    ('B', torch.zeros(2, 2, 5, 2, 5), r'B must have shape \(K, B, L, G, N\) with \(K, B, L\) = '
                                      r'\(2, 2, 6\) as in x'),
    ('C', torch.zeros(2, 2, 6, 2, 4), r'C must have shape \(K, B, L, G, N\) as B'),
    ('D', torch.zeros(4), r'D must have shape \(K, H\) or \(K, H, P\), got \(4,\)'),
    ('D', torch.zeros(2, 3), r'D must have shape \(K, H\) = \(2, 4\) or \(K, H, P\) = '
                             r'\(2, 4, 3\), got \(2, 3\)'),
    ('z', torch.zeros(2, 2, 6, 4, 2), r'z must have shape \(K, B, L, H, P\) as x'),
    ('dt_bias', torch.zeros(4), r'dt_bias must have shape \(K, H\) \(2 dims\)'),
    ('initial_states', torch.zeros(2, 2, 4, 3, 4),
     r'initial_states must have shape \(K, B, H, P, N\) = \(2, 2, 4, 3, 5\)'),
])
def test_bad_stacked_tensor_raises_value_error(inputs, name, value, pattern):
    with pytest.raises(ValueError, match=pattern):
        ssd_scan_directions(**_bad(_stacked(inputs), **{name: value}), reverse=(False, True))


@pytest.mark.parametrize('reverse', [(False, ), (False, True, True), [False, 1], False, 'ft'])
def test_reverse_must_hold_one_bool_per_direction(inputs, reverse):
    with pytest.raises(ValueError, match=r'reverse must be a list or tuple of K = 2 bools, one '
                                         r'per direction of x \(2, 2, 6, 4, 3\), got'):
        ssd_scan_directions(**_stacked(inputs), reverse=reverse)


def test_mixing_matrix_validation(inputs):
    with pytest.raises(ValueError, match=r'A must have shape \(H,\) = \(4,\), got \(2,\)'):
        ssd_mixing_matrix(inputs['dt'], torch.zeros(2), inputs['B'], inputs['C'])
    with pytest.raises(ValueError, match=r'dt must have shape \(B, L, H\) \(3 dims\)'):
        ssd_mixing_matrix(inputs['dt'][0], inputs['A'], inputs['B'], inputs['C'])


class _Recorder:
    """A backend module that records the ScanInputs it is given (and returns zeros)."""

    def __init__(self):
        self.calls = []

    def forward(self, inp):
        self.calls.append(inp)
        return torch.zeros(inp.x.shape), None


@pytest.fixture
def mamba_ssm_state(monkeypatch):
    """``set('missing')``: mamba_ssm does not import (as without its CUDA extension);
    ``set('importable')``: it does; the op's cached answers are cleared before and after."""
    from dinomamba_mm.ops.ssd import mamba_ssm_chunk
    caches = (api._mamba_ssm_unusable, api._cuda_backend, mamba_ssm_chunk.kernels)

    def set_state(state):
        for cache in caches:
            cache.cache_clear()
        if state == 'missing':
            monkeypatch.setitem(sys.modules, 'mamba_ssm', None)
        else:
            monkeypatch.setattr(api, '_mamba_ssm_unusable', lambda: None)

    yield set_state
    for cache in caches:
        cache.cache_clear()


@pytest.fixture
def recorder(monkeypatch, mamba_ssm_state):
    """The backends replaced by one recorder; select_backend still runs for real (mamba_ssm
    importable)."""
    mamba_ssm_state('importable')
    rec = _Recorder()
    chosen = []
    select = api.select_backend
    monkeypatch.setattr(api, 'select_backend', lambda *a: chosen.append(select(*a)) or chosen[-1])
    monkeypatch.setattr(api, '_backend', lambda name: rec)
    monkeypatch.delenv(api.ENV_IMPL, raising=False)
    api._environment_impl.cache_clear()
    rec.chosen = chosen
    yield rec
    api._environment_impl.cache_clear()


@pytest.mark.parametrize('impl,env,expected', [
    (None, None, 'torch'),  # CPU tensors: auto means torch
    ('auto', None, 'torch'),
    ('torch', None, 'torch'),
    ('triton', None, 'triton'),
    (None, 'triton', 'triton'),
    ('auto', 'torch', 'torch'),
    ('torch', 'triton', 'torch'),  # an explicit impl wins over the environment
    ('mamba_ssm', None, 'mamba_ssm'),
    (None, 'mamba_ssm', 'mamba_ssm'),
])
def test_dispatch(inputs, recorder, monkeypatch, impl, env, expected):
    if env is not None:
        monkeypatch.setenv(api.ENV_IMPL, env)
    ssd_scan(**inputs, impl=impl)
    ssd_scan_directions(**_stacked(inputs), reverse=(False, True), impl=impl)
    assert recorder.chosen == [expected, expected]


@pytest.mark.parametrize('impl', ['triton', 'mamba_ssm'])
@pytest.mark.parametrize('dtype,batch', [(torch.float64, 2), (torch.float32, 0)])
def test_float64_and_empty_batches_run_on_torch(dtype, batch, impl, mamba_ssm_state):
    """The GPU kernels compute in float32 over a grid of batch rows."""
    mamba_ssm_state('importable')
    x = torch.zeros(2, batch, 3, 2, 2, dtype=dtype)
    assert api.select_backend(impl, x) == 'torch'
    assert api.select_backend(impl, torch.zeros(2, 2, 3, 2, 2)) == impl


def test_triton_refuses_more_than_two_directions(inputs):
    """Our Triton kernels read two directions at most: K = 3 is an error that says what to do
    (the torch backend takes any K)."""
    pytest.importorskip('triton')
    from dinomamba_mm.ops.ssd import triton_chunk
    stacked = _stacked(inputs, directions=3)
    inp = api._scan_inputs(**stacked, reverse=(False, True, False), chunk_size=16,
                           dt_softplus=True, dt_limit=(0.0, float('inf')),
                           return_final_states=False)
    with pytest.raises(ValueError, match=r"impl='triton' scans at most 2 directions at once, got "
                                         r"K = 3 .*: pass impl='torch'"):
        triton_chunk._kernel_inputs(inp)


def _cuda_tensor(*shape):
    """A CUDA tensor without a GPU (a fake tensor: device, dtype and shape only)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        return torch.empty(*shape, device='cuda')


def test_auto_on_cuda_picks_mamba_ssm_when_it_imports(mamba_ssm_state):
    mamba_ssm_state('importable')
    assert api.select_backend(None, _cuda_tensor(2, 2, 3, 2, 2)) == 'mamba_ssm'
    assert api.select_backend(None, torch.zeros(2, 2, 3, 2, 2)) == 'torch'  # CPU: always


def test_auto_on_cuda_falls_back_with_one_warning_naming_the_reason(mamba_ssm_state):
    """mamba_ssm that does not import (e.g. no CUDA build of its extension): our Triton
    kernels, and one warning, whatever the number of calls; never an error."""
    mamba_ssm_state('missing')
    x = _cuda_tensor(2, 2, 3, 2, 2)
    with pytest.warns(UserWarning, match=r"mamba_ssm's kernels do not import \(ModuleNotFoundError"
                                         r".*\); CUDA tensors run on the 'triton' backend"):
        assert api.select_backend(None, x) == 'triton'
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert api.select_backend('auto', x) == 'triton'


def test_explicit_mamba_ssm_that_does_not_import_is_an_error(inputs, mamba_ssm_state,
                                                             monkeypatch, fresh_environment):
    mamba_ssm_state('missing')
    pattern = (r"impl='mamba_ssm' needs mamba_ssm's Triton kernels, which do not import here "
               r"\(ModuleNotFoundError: .*mamba_ssm.*\): install mamba-ssm with its CUDA "
               r"extension \(pip install mamba-ssm\), or pass impl='triton', 'torch' or None")
    with pytest.raises(ValueError, match=pattern):
        ssd_scan(**inputs, impl='mamba_ssm')
    monkeypatch.setenv(api.ENV_IMPL, 'mamba_ssm')
    with pytest.raises(ValueError, match=pattern):
        ssd_scan(**inputs)


def test_environment_is_read_once(inputs, recorder, monkeypatch):
    """The implementation named by DINOMAMBA_SSD_IMPL is read at the first call, not per call."""
    monkeypatch.setenv(api.ENV_IMPL, 'triton')
    ssd_scan(**inputs)
    monkeypatch.setenv(api.ENV_IMPL, 'torch')
    ssd_scan(**inputs)
    api._environment_impl.cache_clear()
    ssd_scan(**inputs)
    assert recorder.chosen == ['triton', 'triton', 'torch']


def test_dispatch_passes_the_contract_signature(inputs, recorder):
    """The tensors reach the backend as they were given, stacked, with the options of the call:
    ssd_scan's as views with a leading K = 1, a stride-0 expansion as such (no copy)."""
    ssd_scan(**inputs, chunk_size=32, dt_softplus=True, dt_limit=[0.0, 2.0],
             return_final_states=False, reverse=True, impl='triton')
    inp = recorder.calls[-1]
    for name in inp.TENSORS:  # A floored at MIN_A (a copy), the others views of the inputs
        got, given = getattr(inp, name), inputs[name]
        assert got.shape == (1, *given.shape)
        assert torch.equal(got[0], given) if name == 'A' else got.data_ptr() == given.data_ptr()
    assert (inp.reverse, inp.chunk_size, inp.dt_softplus, inp.dt_limit,
            inp.return_final_states) == ((True,), 32, True, (0.0, 2.0), False)
    stacked = {k: v for k, v in _stacked(inputs).items() if k not in ('initial_states', 'z')}
    stacked['dt'] = inputs['dt'].expand(2, -1, -1, -1)
    ssd_scan_directions(**stacked, reverse=[False, True], impl='torch')
    inp = recorder.calls[-1]
    assert inp.x is stacked['x'] and inp.dt is stacked['dt'] and inp.dt.stride(0) == 0
    assert inp.z is None and inp.initial_states is None
    assert inp.reverse == (False, True)


def test_autocast_region_keeps_forward_and_backward_consistent():
    """Mixed-precision training calls the op inside torch.autocast; its bf16 inputs must give
    the oracle's result and a backward pass (autocast would otherwise mix dtypes inside)."""
    from dinomamba_mm.ops.ssd.naive import ssd_scan_naive
    torch.manual_seed(0)
    batch, length, heads, headdim, dstate = 2, 37, 4, 8, 8
    proj_x, proj_bc = torch.nn.Linear(headdim, headdim), torch.nn.Linear(dstate, dstate)
    x0 = torch.randn(batch, length, heads, headdim, requires_grad=True)
    b0 = torch.randn(batch, length, 1, dstate)
    c0 = torch.randn(batch, length, 1, dstate)
    dt = torch.randn(batch, length, heads, requires_grad=True)
    A = -torch.rand(heads) - 0.5
    with torch.autocast('cpu', dtype=torch.bfloat16):
        x, B, C = proj_x(x0), proj_bc(b0), proj_bc(c0)
        y = ssd_scan(x, dt, A, B, C, chunk_size=16, dt_softplus=True)
        y_fwd, y_bwd = ssd_scan_directions(*(t.expand(2, *t.shape) for t in (x, dt, A, B, C)),
                                           reverse=(False, True), chunk_size=16,
                                           dt_softplus=True)
    assert y.dtype == y_fwd.dtype == torch.bfloat16
    (y.float().sum() + y_fwd.float().sum() + y_bwd.float().sum()).backward()
    assert torch.isfinite(x0.grad).all() and torch.isfinite(dt.grad).all()
    ref = ssd_scan_naive(x.double(), dt.double(), A.double(), B.double(), C.double(),
                         dt_softplus=True)
    scale = ref.abs().max().clamp(min=1)
    assert ((y.double() - ref).abs().max() / scale) < 2e-2  # bf16 output rounding
    torch.testing.assert_close(y_fwd, y)
