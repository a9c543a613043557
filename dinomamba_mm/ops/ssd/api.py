"""Public SSD (Mamba-2 state space duality) scan: validation, dt preprocessing spec, dispatch.

:func:`ssd_scan` runs one scan direction; :func:`ssd_scan_directions` runs K directions of the
same sizes at once, given as tensors stacked along a leading dimension of K with a ``reverse``
flag per direction (a bidirectional vision mixer passes K = 2, its forward and its reverse scan;
:func:`ssd_scan` is the case K = 1). Semantics, per direction, batch b, head h,
group g = h // (H // G):

1. dt' = dt + dt_bias (if given); softplus if ``dt_softplus``; clamp to ``dt_limit`` unless it is
   (0, inf) (mamba_ssm's kernels clamp at (0, inf) too: a negative dt' counts as 0 there).
2. Forward: h_t = exp(dt'_t A_h) h_{t-1} + dt'_t x_t B_t^T (h_t is P x N), h_{-1} =
   initial_states (zeros if None), y_t = h_t C_t + D_h x_t, final_states = h_{L-1}.
   A = -inf is a head that forgets at every step (A below ``MIN_A`` acts as -inf). dt' A > 0 (A
   > 0, or dt' < 0 without softplus) grows the state instead and overflows on long sequences:
   the torch backend warns once (the GPU kernels do not look: that would cost a host sync).
   A reverse direction runs t from L-1 down to 0 with h_L = initial_states; final_states = h_0.
   Inputs and outputs are in input token order for every direction: nothing is flipped.
3. With z: y = y * silu(z).
4. Accumulation in float32 for fp32 / fp16 / bf16 inputs (float64 inputs stay float64, which
   gradcheck needs); y has x's dtype, final_states the accumulation dtype.

5. A non-finite dt' at token t makes the outputs from t on (in scan order) and the final state
   non-finite, as in the recurrence, and leaves the earlier tokens' outputs as they are. (A
   non-finite x with a finite dt' at t can also reach the earlier tokens of t's chunk: the
   chunked algorithm multiplies it by the zeros of the causal masks.)
6. B = 0 gives empty outputs (and zero gradients for the parameters); H = 0, P = 0, N = 0 or
   L = 0 are errors.

Implementations ("backends"), chosen for each call by :func:`select_backend`: 'torch'
(``chunk.py``, any device), 'triton' (``triton_chunk.py``, CUDA, or CPU under
``TRITON_INTERPRET=1``), both written as the stages of ``chunk_stages.py`` (see its docstring;
``reference.py`` is the same algorithm in einsum form), and 'mamba_ssm' (``mamba_ssm_chunk.py``:
mamba_ssm's own kernels, one call per direction, CUDA). All run inside one opaque custom op,
``torch.ops.dinomamba_mm.ssd_scan`` (with a fake implementation and a registered backward, the op
``ssd_scan_backward``, which calls the backend's backward), so that torch.compile and
torch.export see the scan as one node and the fast paths keep their buffers and data-dependent
shortcuts; mamba_ssm's kernels, whose launch code torch.compile would otherwise trace into, run
there too.
"""
import functools
import importlib
import os
import warnings
from typing import List, Optional, Sequence, Tuple, Union

import torch

from .matrix import mixing_matrix
from .scan_inputs import ScanInputs, compute_dtype

Tensor = torch.Tensor

IMPLS = ('auto', 'torch', 'triton', 'mamba_ssm')
ENV_IMPL = 'DINOMAMBA_SSD_IMPL'
#: the dtypes the backends compute (float64 on the torch backend only, see select_backend)
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _shape(t: torch.Tensor) -> str:
    return str(tuple(t.shape))


def _tensor_shape(name: str, t, ndim: int, expected: str) -> torch.Size:
    """t's shape, after checking that t is a dense floating point tensor with ``ndim`` dims."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f'{name} must be a torch.Tensor of shape {expected}, '
                        f'got {type(t).__name__}')
    if t.layout != torch.strided:
        raise ValueError(f'{name} must be a dense (strided) tensor, got layout {t.layout}: '
                         'convert it with .to_dense()')
    shape = t.shape
    if len(shape) != ndim:
        raise ValueError(f'{name} must have shape {expected} ({ndim} dims), got shape {_shape(t)}')
    if t.dtype not in FLOAT_DTYPES:
        raise ValueError(f'{name} must be a floating point tensor of dtype float16, bfloat16, '
                         f'float32 or float64, got dtype {t.dtype}')
    return shape


def _check_dims(name: str, t: torch.Tensor, ndim: int, expected: Tuple[int, ...],
                label: str) -> None:
    if _tensor_shape(name, t, ndim, label) != expected:
        raise ValueError(f'{name} must have shape {label} = {tuple(expected)}, got {_shape(t)}')


def _validate(x, dt, A, B, C, chunk_size, D, z, dt_bias, dt_limit, initial_states,
              stacked: bool = False) -> None:
    """Raise ValueError / TypeError naming the first bad argument (a few microseconds when
    every argument is right). Shapes as in :func:`ssd_scan`, or with a leading K (the
    directions) as in :func:`ssd_scan_directions` when ``stacked``."""
    lead = 1 if stacked else 0

    def label(single: str) -> str:  # '(H,)' -> '(K, H)' when stacked
        return '(K, ' + single[1:].replace(',)', ')') if stacked else single

    x_shape = _tensor_shape('x', x, 4 + lead, label('(B, L, H, P)'))
    k, (batch, length, heads, headdim) = tuple(x_shape[:lead]), x_shape[lead:]
    if stacked and x_shape[0] == 0:
        raise ValueError(f'x must hold at least one direction (K > 0), got shape {_shape(x)}')
    if length == 0:
        raise ValueError(f'x must hold at least one token, got shape {_shape(x)}')
    if heads == 0 or headdim == 0:
        raise ValueError(f'x must have at least one head (H > 0) of at least one channel '
                         f'(P > 0): x has shape {label("(B, L, H, P)")} = {_shape(x)}')
    _check_dims('dt', dt, 3 + lead, k + (batch, length, heads), label('(B, L, H)'))
    _check_dims('A', A, 1 + lead, k + (heads, ), label('(H,)'))
    B_shape = _tensor_shape('B', B, 4 + lead, label('(B, L, G, N)'))
    if B_shape[:2 + lead] != k + (batch, length):
        raise ValueError(f'B must have shape {label("(B, L, G, N)")} with '
                         f'{label("(B, L)")} = {k + (batch, length)} as in x, got {_shape(B)}')
    groups, dstate = B_shape[-2], B_shape[-1]
    if dstate == 0:
        raise ValueError(f'B must have a state size N > 0: B has shape {label("(B, L, G, N)")} '
                         f'= {_shape(B)}')
    if groups == 0 or heads % groups != 0:
        raise ValueError(f'the number of heads H = {heads} (x {_shape(x)}) must be a multiple of '
                         f'the number of groups G = {groups} (B {_shape(B)})')
    _check_dims('C', C, 4 + lead, B_shape, label('(B, L, G, N)') + ' as B')
    if D is not None:
        D_label = f'{label("(H,)")} or {label("(H, P)")}'
        if not isinstance(D, torch.Tensor) or D.dim() - lead not in (1, 2):
            got = _shape(D) if isinstance(D, torch.Tensor) else type(D).__name__
            raise ValueError(f'D must have shape {D_label}, got {got}')
        if _tensor_shape('D', D, D.dim(), D_label) not in (k + (heads, ),
                                                            k + (heads, headdim)):
            raise ValueError(f'D must have shape {label("(H,)")} = {k + (heads, )} or '
                             f'{label("(H, P)")} = {k + (heads, headdim)}, got {_shape(D)}')
    if z is not None:
        _check_dims('z', z, 4 + lead, x_shape, label('(B, L, H, P)') + ' as x')
    if dt_bias is not None:
        _check_dims('dt_bias', dt_bias, 1 + lead, k + (heads, ), label('(H,)'))
    if initial_states is not None:
        _check_dims('initial_states', initial_states, 4 + lead,
                    k + (batch, heads, headdim, dstate), label('(B, H, P, N)'))
    for name, t in dict(dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=dt_bias,
                        initial_states=initial_states).items():
        if t is not None and t.device != x.device:
            raise ValueError(f'{name} is on device {t.device} but x is on {x.device}; '
                             'all tensors must be on one device')
        if name in ('B', 'C', 'z') and t is not None and t.dtype != x.dtype:
            raise ValueError(f'{name} has dtype {t.dtype} but x has {x.dtype}; x, B, C and '
                             'z must share one dtype')

    if type(chunk_size) is not int or chunk_size <= 0:
        raise ValueError(f'chunk_size must be a positive int, got {chunk_size!r}')
    try:
        lo, hi = (float(v) for v in dt_limit)
    except (TypeError, ValueError):
        raise ValueError(f'dt_limit must be a pair (min, max) of floats, got {dt_limit!r}')
    if not 0 <= lo <= hi:  # False for NaN too
        raise ValueError(f'dt_limit must satisfy 0 <= min <= max, got {dt_limit!r}')


# read once, and by torch.compile at tracing time rather than traced
@torch.compiler.assume_constant_result
@functools.lru_cache(maxsize=None)
def _environment_impl() -> Optional[str]:
    """The value of ``DINOMAMBA_SSD_IMPL`` (None if unset), read and checked once."""
    env = os.environ.get(ENV_IMPL) or None
    if env is not None and env not in IMPLS:
        raise ValueError(f'environment variable {ENV_IMPL} must be one of '
                         f'{", ".join(map(repr, IMPLS))}, got {env!r}')
    return env


@torch.compiler.assume_constant_result
@functools.lru_cache(maxsize=None)
def _triton_importable() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@torch.compiler.assume_constant_result
@functools.lru_cache(maxsize=None)
def _mamba_ssm_unusable() -> Optional[str]:
    """Why mamba_ssm's SSD kernels cannot run here (None when they can), tried once."""
    from . import mamba_ssm_chunk
    try:
        mamba_ssm_chunk.kernels()
    except Exception as error:  # a missing package, a CUDA extension built for another torch
        return f'{type(error).__name__}: {error}'
    return None


@torch.compiler.assume_constant_result
@functools.lru_cache(maxsize=None)
def _cuda_backend() -> str:
    """What 'auto' runs on CUDA tensors: mamba_ssm's kernels when they import, else ours
    (Triton) when triton imports, else torch; warns once when mamba_ssm's do not."""
    reason = _mamba_ssm_unusable()
    if reason is None:
        return 'mamba_ssm'
    fallback = 'triton' if _triton_importable() else 'torch'
    warnings.warn(f"SSD scan: mamba_ssm's kernels do not import ({reason}); CUDA tensors run on "
                  f"the '{fallback}' backend instead (pip install mamba-ssm with its CUDA "
                  f"extension for this torch, or set {ENV_IMPL}={fallback} to choose it). "
                  'Warned once.')
    return fallback


def select_backend(impl: Optional[str], x: Tensor) -> str:
    """'torch', 'triton' or 'mamba_ssm' for a call on x (K, B, L, H, P); the one place that
    chooses.

    ``impl`` None or 'auto' uses ``DINOMAMBA_SSD_IMPL`` (same values; read once, at the first
    call) and otherwise picks, for CUDA tensors, mamba_ssm's kernels when they import (else,
    with one warning that names the reason, ours in Triton when triton imports, else torch);
    for any other device torch. Float64 inputs and batches of size 0 run on the torch backend
    whatever ``impl`` says (the GPU kernels compute in float32 and launch a grid per batch row).
    An explicit 'mamba_ssm' that does not import is an error naming the reason.
    """
    if impl is None or impl == 'auto':
        impl = _environment_impl() or 'auto'
    elif impl not in IMPLS:
        raise ValueError(f'impl must be one of None, {", ".join(map(repr, IMPLS))}, got {impl!r}')
    if x.dtype == torch.float64 or x.shape[1] == 0:
        return 'torch'
    if impl == 'auto':
        return _cuda_backend() if x.device.type == 'cuda' else 'torch'
    if impl == 'mamba_ssm' and _mamba_ssm_unusable() is not None:
        raise ValueError(f"impl='mamba_ssm' needs mamba_ssm's Triton kernels, which do not "
                         f'import here ({_mamba_ssm_unusable()}): install mamba-ssm with its '
                         "CUDA extension (pip install mamba-ssm), or pass impl='triton', "
                         "'torch' or None")
    return impl


_BACKEND_MODULES = dict(torch='chunk', triton='triton_chunk', mamba_ssm='mamba_ssm_chunk')
#: backends whose backward reads the op's output instead of recomputing it (when not gated)
_KEEPS_OUTPUT = ('mamba_ssm', )


def _backend(name: str):
    """The module of a backend: ``forward`` and ``backward`` of a ScanInputs."""
    return importlib.import_module(f'.{_BACKEND_MODULES[name]}', __package__)


#: A below this acts as A = -inf: exp(dt' A) underflows to 0 for every dt' > 1e-9, while the
#: running sums of dt' A stay finite (an infinite one makes the chunked differences NaN).
MIN_A = -1e12


def _scan_inputs(x, dt, A, B, C, D, z, dt_bias, initial_states, reverse, chunk_size,
                 dt_softplus, dt_limit, return_final_states) -> ScanInputs:
    # in at least float32: MIN_A is beyond float16's range
    A = A.to(torch.promote_types(A.dtype, torch.float32)).clamp(min=MIN_A)
    return ScanInputs(x, dt, A, B, C, D, z, dt_bias, initial_states, tuple(reverse), chunk_size,
                      dt_softplus, (float(dt_limit[0]), float(dt_limit[1])),
                      return_final_states)


def _scan(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Optional[Tensor],
          z: Optional[Tensor], dt_bias: Optional[Tensor], initial_states: Optional[Tensor],
          reverse: List[bool], chunk_size: int, dt_softplus: bool, dt_limit: List[float],
          return_final_states: bool, backend: str) -> List[Tensor]:
    """The scan of every direction (tensors stacked as in :func:`ssd_scan_directions`):
    [y (K, B, L, H, P), final states (K, B, H, P, N) if asked for]. Nothing else is kept for
    the backward pass, whose backends recompute from the inputs (and, for ``_KEEPS_OUTPUT``,
    y)."""
    inp = _scan_inputs(x, dt, A, B, C, D, z, dt_bias, initial_states, reverse, chunk_size,
                       dt_softplus, dt_limit, return_final_states)
    # The op chooses its own precision (fp32 accumulation); autocast would hand its matmuls
    # mixed dtypes.
    with torch.autocast(device_type=x.device.type, enabled=False):
        y, final = _backend(backend).forward(inp)
    return [y, final] if return_final_states else [y]


_scan_op = torch.library.custom_op('dinomamba_mm::ssd_scan', _scan, mutates_args=())


@_scan_op.register_fake
def _scan_fake(x, dt, A, B, C, D, z, dt_bias, initial_states, reverse, chunk_size, dt_softplus,
               dt_limit, return_final_states, backend):
    y = x.new_empty(x.shape)
    if not return_final_states:
        return [y]
    directions, batch, _, heads, headdim = x.shape
    return [y, x.new_empty((directions, batch, heads, headdim, B.shape[-1]),
                           dtype=compute_dtype(x))]


def _scan_backward(dy: Optional[Tensor], d_final: Optional[Tensor], y: Optional[Tensor],
                   x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor,
                   D: Optional[Tensor], z: Optional[Tensor], dt_bias: Optional[Tensor],
                   initial_states: Optional[Tensor], reverse: List[bool], chunk_size: int,
                   dt_softplus: bool, dt_limit: List[float], backend: str) -> List[Tensor]:
    """Gradients of the inputs that are not None (``ScanInputs.present`` order) from those of y
    and of the final states (None where they got none); y is the op's output where the backend
    keeps it."""
    inp = _scan_inputs(x, dt, A, B, C, D, z, dt_bias, initial_states, reverse, chunk_size,
                       dt_softplus, dt_limit, d_final is not None)
    kept = {} if y is None else dict(y=y)
    with torch.autocast(device_type=x.device.type, enabled=False):
        grads = _backend(backend).backward(inp, dy, d_final, **kept)
    given = [t for t in (x, dt, A, B, C, D, z, dt_bias, initial_states) if t is not None]
    # each gradient has its input's dtype (A is computed in at least float32), an op's outputs
    # must not share memory, and compiled graphs expect the fake's strides
    storages = set()
    for i, (g, t) in enumerate(zip(grads, given)):
        g = g.to(t.dtype)
        if g.untyped_storage().data_ptr() in storages or not g.is_contiguous():
            g = g.clone(memory_format=torch.contiguous_format)
        storages.add(g.untyped_storage().data_ptr())
        grads[i] = g
    return grads


_scan_backward_op = torch.library.custom_op('dinomamba_mm::ssd_scan_backward', _scan_backward,
                                            mutates_args=())


@_scan_backward_op.register_fake
def _scan_backward_fake(dy, d_final, y, x, dt, A, B, C, D, z, dt_bias, initial_states, *rest):
    return [t.new_empty(t.shape) for t in (x, dt, A, B, C, D, z, dt_bias, initial_states)
            if t is not None]


_TENSOR_ARGS = len(ScanInputs.TENSORS)


def _setup_context(ctx, inputs, output) -> None:
    tensors, options = inputs[:_TENSOR_ARGS], inputs[_TENSOR_ARGS:]
    reverse, chunk_size, dt_softplus, dt_limit, return_final_states, backend = options
    ctx.set_materialize_grads(False)
    keeps_output = backend in _KEEPS_OUTPUT and tensors[ScanInputs.TENSORS.index('z')] is None
    ctx.save_for_backward(*tensors, output[0] if keeps_output else None)
    ctx.options = (reverse, chunk_size, dt_softplus, dt_limit, backend)
    ctx.final = return_final_states


def _backward(ctx, grads):
    *tensors, y = ctx.saved_tensors
    d_final = grads[1] if ctx.final else None
    found = iter(_scan_backward_op(grads[0], d_final, y, *tensors, *ctx.options))
    return (*(None if t is None else next(found) for t in tensors), *(None, ) * 6)


_scan_op.register_autograd(_backward, setup_context=_setup_context)


def _scan_reference(x, dt, A, B, C, D, z, dt_bias, initial_states, reverse, chunk_size,
                    dt_softplus, dt_limit, return_final_states, backend) -> List[Tensor]:
    """The op as the chunked einsum listing of ``reference.py`` in the compute dtype, for
    exporters that cannot call a custom op (ONNX): no buffers, no data-dependent shortcuts."""
    from .reference import ssd_chunked_reference
    inp = ScanInputs(x, dt, A, B, C, D, z, dt_bias, initial_states, tuple(reverse), chunk_size,
                     dt_softplus, tuple(dt_limit), return_final_states)
    ys, finals = [], []
    for args in zip(*(inp.per_direction(name) for name in ScanInputs.TENSORS), reverse):
        y, final = ssd_chunked_reference(*args[:5], chunk_size, *args[5:8], dt_softplus,
                                         tuple(dt_limit), args[8], True, args[9],
                                         compute_dtype(x))
        ys.append(y.to(x.dtype))
        finals.append(final)
    return [torch.stack(ys)] + ([torch.stack(finals)] if return_final_states else [])


def export_decompositions() -> dict:
    """``ExportedProgram.run_decompositions`` table that lowers the scan op to ATen ops (the
    chunked reference), for ``torch.onnx.export`` of an exported program."""
    return {torch.ops.dinomamba_mm.ssd_scan.default: _scan_reference}


def _run(x, dt, A, B, C, D, z, dt_bias, initial_states, reverse: Sequence[bool],
         chunk_size: int, dt_softplus: bool, dt_limit, return_final_states: bool,
         impl: Optional[str]) -> List[Tensor]:
    """The op over validated stacked tensors."""
    return _scan_op(x, dt, A, B, C, D, z, dt_bias, initial_states, list(reverse), chunk_size,
                    dt_softplus, [float(dt_limit[0]), float(dt_limit[1])], return_final_states,
                    select_backend(impl, x))


def ssd_scan(
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    chunk_size: int = 64,
    D: Optional[Tensor] = None,
    z: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Tuple[float, float] = (0.0, float('inf')),
    initial_states: Optional[Tensor] = None,
    return_final_states: bool = False,
    reverse: bool = False,
    impl: Optional[str] = None,
) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """SSD scan over a sequence in one direction (Mamba-2's ``mamba_chunk_scan_combined``
    semantics): :func:`ssd_scan_directions` with K = 1.

    Args:
        x (Tensor): (B, L, H, P) inputs.
        dt (Tensor): (B, L, H) step sizes (before ``dt_bias`` / softplus / ``dt_limit``).
        A (Tensor): (H,) decay rates, negative for a stable scan.
        B (Tensor): (B, L, G, N) input projections, H % G == 0; head h reads group
            h // (H // G).
        C (Tensor): (B, L, G, N) output projections.
        chunk_size (int): chunk length of the chunked algorithm (the result does not depend on
            it). The torch backend cuts the sequence into ceil(L / chunk_size) chunks of equal
            length (at most chunk_size); 64 is where its CPU time is lowest
            (``tools/benchmarks/ssd.py --chunk-sweep``). Our Triton kernels use the largest
            power of two in [16, 32] not above it; mamba_ssm's kernels use it as given (its own
            default is 256). Defaults to 64.
        D (Tensor, optional): (H,) or (H, P) skip term D * x. Defaults to None.
        z (Tensor, optional): (B, L, H, P) gate: y * silu(z). Defaults to None.
        dt_bias (Tensor, optional): (H,) added to dt. Defaults to None.
        dt_softplus (bool): softplus on dt + dt_bias. Defaults to False.
        dt_limit (tuple[float, float]): (min, max) clamp on dt' (skipped for (0, inf)).
            Defaults to (0.0, inf).
        initial_states (Tensor, optional): (B, H, P, N) incoming state, zeros if None.
            Defaults to None.
        return_final_states (bool): also return the (B, H, P, N) final state (float32; float64
            for float64 x). Defaults to False.
        reverse (bool): scan from the last token to the first. Defaults to False.
        impl (str, optional): None / 'auto', 'torch', 'triton' or 'mamba_ssm' (see
            :func:`select_backend`). Defaults to None.

    Returns:
        Tensor | tuple(Tensor): y (B, L, H, P) in x's dtype, and final_states (B, H, P, N) when
        asked for.
    """
    _validate(x, dt, A, B, C, chunk_size, D, z, dt_bias, dt_limit, initial_states)
    out = _run(*(None if t is None else t.unsqueeze(0)
                 for t in (x, dt, A, B, C, D, z, dt_bias, initial_states)),
               [bool(reverse)], chunk_size, dt_softplus, dt_limit, return_final_states, impl)
    y = out[0].squeeze(0)
    return (y, out[1].squeeze(0)) if return_final_states else y


def ssd_scan_directions(
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    reverse: Sequence[bool],
    chunk_size: int = 64,
    D: Optional[Tensor] = None,
    z: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Tuple[float, float] = (0.0, float('inf')),
    initial_states: Optional[Tensor] = None,
    return_final_states: bool = False,
    impl: Optional[str] = None,
) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """K scans of the same sizes at once, e.g. the forward and the reverse scan of a
    bidirectional vision mixer (K = 2, ``reverse=(False, True)``), in one pass of every stage.

    Every tensor holds the K directions stacked along its first dimension; direction k is
    :func:`ssd_scan` of the k-th entries with ``reverse=reverse[k]``. Everything, inputs and
    outputs, is in input token order: a reverse direction is never flipped by the caller.
    Expanded (stride 0) views are valid inputs and are not copied, e.g. one dt shared by both
    directions: ``dt.expand(2, -1, -1, -1)``.

    Args:
        x (Tensor): (K, B, L, H, P) inputs.
        dt (Tensor): (K, B, L, H) step sizes (before ``dt_bias`` / softplus / ``dt_limit``).
        A (Tensor): (K, H) decay rates.
        B (Tensor): (K, B, L, G, N) input projections, H % G == 0.
        C (Tensor): (K, B, L, G, N) output projections.
        reverse (Sequence[bool]): K flags: direction k scans from the last token to the first
            when ``reverse[k]``.
        chunk_size (int): chunk length (see :func:`ssd_scan`). Defaults to 64.
        D (Tensor, optional): (K, H) or (K, H, P) skip term D * x. Defaults to None.
        z (Tensor, optional): (K, B, L, H, P) gate: y * silu(z). Defaults to None.
        dt_bias (Tensor, optional): (K, H) added to dt. Defaults to None.
        dt_softplus (bool): softplus on dt + dt_bias. Defaults to False.
        dt_limit (tuple[float, float]): (min, max) clamp on dt'. Defaults to (0.0, inf).
        initial_states (Tensor, optional): (K, B, H, P, N) state entering each direction's
            scan (at its first token in scan order), zeros if None. Defaults to None.
        return_final_states (bool): also return the (K, B, H, P, N) states leaving each
            direction's scan (for a reverse direction, the state after token 0; float32,
            float64 for float64 x). Defaults to False.
        impl (str, optional): None / 'auto', 'torch', 'triton' or 'mamba_ssm' (see
            :func:`select_backend`). Defaults to None.

    Returns:
        Tensor | tuple(Tensor): y (K, B, L, H, P) in x's dtype, and final_states
        (K, B, H, P, N) when asked for.
    """
    _validate(x, dt, A, B, C, chunk_size, D, z, dt_bias, dt_limit, initial_states,
              stacked=True)
    directions = x.shape[0]
    if not (isinstance(reverse, (list, tuple)) and len(reverse) == directions
            and all(isinstance(r, bool) for r in reverse)):
        raise ValueError(f'reverse must be a list or tuple of K = {directions} bools, one per '
                         f'direction of x {_shape(x)}, got {reverse!r}')
    out = _run(x, dt, A, B, C, D, z, dt_bias, initial_states, reverse, chunk_size, dt_softplus,
               dt_limit, return_final_states, impl)
    return (out[0], out[1]) if return_final_states else out[0]


def ssd_mixing_matrix(
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    dt_bias: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Tuple[float, float] = (0.0, float('inf')),
    reverse: bool = False,
) -> torch.Tensor:
    """Materialised token-mixing matrix of one scan direction (L^2 memory; for analysis).

    Args:
        dt (Tensor): (B, L, H).
        A (Tensor): (H,).
        B (Tensor): (B, L, G, N).
        C (Tensor): (B, L, G, N).
        dt_bias (Tensor, optional): (H,) added to dt, as in :func:`ssd_scan`. Defaults to None.
        dt_softplus (bool): Softplus on dt + dt_bias. Defaults to False.
        dt_limit (tuple[float, float]): (min, max) clamp on dt' (skipped for (0, inf)).
            Defaults to ``(0.0, inf)``.
        reverse (bool): The scan runs from the last token to the first. Defaults to False.

    Returns:
        Tensor: M (B, H, L, L) float32 with ``y = einsum('bhij,bjhp->bihp', M, x) + D * x``
        (before the z gate) for the scan of any x with these dt, A, B, C.
    """
    batch, length, heads = _tensor_shape('dt', dt, 3, '(B, L, H)')
    _tensor_shape('B', B, 4, '(B, L, G, N)')
    probe = B.new_empty(batch, length, heads, 1)  # x's role in the shared checks
    _validate(probe, dt, A, B, C, 1, None, None, dt_bias, dt_limit, None)
    return mixing_matrix(dt, A, B, C, dt_bias, dt_softplus, tuple(dt_limit), reverse)
