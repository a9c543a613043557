"""Public SSD (Mamba-2 state space duality) scan: validation, dt preprocessing spec, dispatch.

Semantics, per batch b, head h, group g = h // (H // G):

1. dt' = dt + dt_bias (if given); softplus if ``dt_softplus``; clamp to ``dt_limit`` unless it is
   (0, inf).
2. Forward: h_t = exp(dt'_t A_h) h_{t-1} + dt'_t x_t B_t^T (h_t is P x N), h_{-1} =
   initial_states (zeros if None), y_t = h_t C_t + D_h x_t, final_states = h_{L-1}.
   A = -inf is a head that forgets at every step (A below ``MIN_A`` acts as -inf). dt' A > 0 (A
   > 0, or dt' < 0 without softplus) grows the state instead and overflows on long sequences:
   the torch backend warns once (the Triton kernels do not look: that would cost a host sync).
   ``reverse=True`` runs t from L-1 down to 0 with h_L = initial_states; final_states = h_0.
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
(``chunk.py``, any device) and 'triton' (``triton_chunk.py``, CUDA, or CPU under
``TRITON_INTERPRET=1``), both written as the stages of ``chunk_stages.py`` (see its docstring;
``reference.py`` is the same algorithm in einsum form). Both run inside one opaque custom op,
``torch.ops.dinomamba_mm.ssd_scan`` (with a fake implementation and a registered backward, the op
``ssd_scan_backward``), so that torch.compile and torch.export see the scan as one node and the
fast paths keep their buffers and data-dependent shortcuts.
"""
import functools
import importlib
import os
from typing import List, Optional, Sequence, Tuple, Union

import torch

from .matrix import mixing_matrix
from .scan_inputs import ScanInputs, compute_dtype

Tensor = torch.Tensor

IMPLS = ('auto', 'torch', 'triton')
ENV_IMPL = 'DINOMAMBA_SSD_IMPL'
Pair = Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]


def _shape(t: torch.Tensor) -> str:
    return str(tuple(t.shape))


def _tensor_shape(name: str, t, ndim: int, expected: str) -> torch.Size:
    """t's shape, after checking that t is a floating point tensor with ``ndim`` dims."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f'{name} must be a torch.Tensor of shape {expected}, '
                        f'got {type(t).__name__}')
    shape = t.shape
    if len(shape) != ndim:
        raise ValueError(f'{name} must have shape {expected} ({ndim} dims), got shape {_shape(t)}')
    if not t.dtype.is_floating_point:
        raise ValueError(f'{name} must be a floating point tensor, got dtype {t.dtype}')
    return shape


def _check_dims(name: str, t: torch.Tensor, ndim: int, expected: Tuple[int, ...],
                label: str) -> None:
    if _tensor_shape(name, t, ndim, label) != expected:
        raise ValueError(f'{name} must have shape {label} = {tuple(expected)}, got {_shape(t)}')


def _validate(x, dt, A, B, C, chunk_size, D, z, dt_bias, dt_limit, initial_states,
              prefix: str = '') -> None:
    """Raise ValueError / TypeError naming the first bad argument (a few microseconds when
    every argument is right)."""
    p = prefix
    batch, length, heads, headdim = x_shape = _tensor_shape(p + 'x', x, 4, '(B, L, H, P)')
    if length == 0:
        raise ValueError(f'{p}x must hold at least one token, got shape {_shape(x)}')
    if heads == 0 or headdim == 0:
        raise ValueError(f'{p}x must have at least one head (H > 0) of at least one channel '
                         f'(P > 0): x has shape (B, L, H, P) = {_shape(x)}')
    _check_dims(p + 'dt', dt, 3, (batch, length, heads), '(B, L, H)')
    _check_dims(p + 'A', A, 1, (heads,), '(H,)')
    B_shape = _tensor_shape(p + 'B', B, 4, '(B, L, G, N)')
    if B_shape[:2] != (batch, length):
        raise ValueError(f'{p}B must have shape (B, L, G, N) with (B, L) = {(batch, length)} '
                         f'as in x, got {_shape(B)}')
    groups, dstate = B_shape[2], B_shape[3]
    if dstate == 0:
        raise ValueError(f'{p}B must have a state size N > 0: B has shape (B, L, G, N) = '
                         f'{_shape(B)}')
    if groups == 0 or heads % groups != 0:
        raise ValueError(f'the number of heads H = {heads} (x {_shape(x)}) must be a multiple of '
                         f'the number of groups G = {groups} ({p}B {_shape(B)})')
    _check_dims(p + 'C', C, 4, B_shape, '(B, L, G, N) as B')
    if D is not None:
        if not isinstance(D, torch.Tensor) or D.dim() not in (1, 2):
            got = _shape(D) if isinstance(D, torch.Tensor) else type(D).__name__
            raise ValueError(f'{p}D must have shape (H,) or (H, P), got {got}')
        if _tensor_shape(p + 'D', D, D.dim(), '(H,) or (H, P)') not in ((heads,),
                                                                        (heads, headdim)):
            raise ValueError(f'{p}D must have shape (H,) = {(heads,)} or (H, P) = '
                             f'{(heads, headdim)}, got {_shape(D)}')
    if z is not None:
        _check_dims(p + 'z', z, 4, x_shape, '(B, L, H, P) as x')
    if dt_bias is not None:
        _check_dims(p + 'dt_bias', dt_bias, 1, (heads,), '(H,)')
    if initial_states is not None:
        _check_dims(p + 'initial_states', initial_states, 4, (batch, heads, headdim, dstate),
                    '(B, H, P, N)')
    for name, t in dict(dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=dt_bias,
                        initial_states=initial_states).items():
        if t is not None and t.device != x.device:
            raise ValueError(f'{p}{name} is on device {t.device} but x is on {x.device}; '
                             'all tensors must be on one device')
        if name in ('B', 'C', 'z') and t is not None and t.dtype != x.dtype:
            raise ValueError(f'{p}{name} has dtype {t.dtype} but x has {x.dtype}; x, B, C and '
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


def select_backend(impl: Optional[str], x: Tensor) -> str:
    """'torch' or 'triton' for a call on x (B, L, H, P); the one place that chooses.

    ``impl`` None or 'auto' uses ``DINOMAMBA_SSD_IMPL`` (same values; read once, at the first
    call) and otherwise picks Triton for CUDA tensors when triton imports, else torch. The Triton
    kernels compute in float32 and launch a grid per batch row: float64 inputs, and batches of
    size 0, run on the torch backend whatever ``impl`` says.
    """
    if impl is None or impl == 'auto':
        impl = _environment_impl() or 'auto'
    elif impl not in IMPLS:
        raise ValueError(f'impl must be one of None, {", ".join(map(repr, IMPLS))}, got {impl!r}')
    if impl == 'auto':
        impl = 'triton' if x.device.type == 'cuda' and _triton_importable() else 'torch'
    if x.dtype == torch.float64 or x.shape[0] == 0:
        return 'torch'
    return impl


def _backend(name: str):
    """The module of a backend: ``forward`` and ``backward`` of a ScanInputs."""
    return importlib.import_module(f'.{"chunk" if name == "torch" else "triton_chunk"}',
                                   __package__)


#: A below this acts as A = -inf: exp(dt' A) underflows to 0 for every dt' > 1e-9, while the
#: running sums of dt' A stay finite (an infinite one makes the chunked differences NaN).
MIN_A = -1e12


def _scan_inputs(x, dt, A, B, C, D, z, dt_bias, initial_states, reverse, chunk_size,
                 dt_softplus, dt_limit, return_final_states) -> ScanInputs:
    A = tuple(a.clamp(min=MIN_A) for a in A)
    return ScanInputs(tuple(x), tuple(dt), A, tuple(B), tuple(C), tuple(D), tuple(z),
                      tuple(dt_bias), tuple(initial_states), tuple(reverse), chunk_size,
                      dt_softplus, (float(dt_limit[0]), float(dt_limit[1])),
                      return_final_states)


def _scan(x: List[Tensor], dt: List[Tensor], A: List[Tensor], B: List[Tensor], C: List[Tensor],
          D: List[Optional[Tensor]], z: List[Optional[Tensor]], dt_bias: List[Optional[Tensor]],
          initial_states: List[Optional[Tensor]], reverse: List[bool], chunk_size: int,
          dt_softplus: bool, dt_limit: List[float], return_final_states: bool,
          backend: str) -> List[Tensor]:
    """The scan of every direction (the lists hold one entry per direction): [y (B, L, H, P) per
    direction, final state (B, H, P, N) if asked for (one direction)]. Nothing else is kept for
    the backward pass, whose backends recompute from the inputs."""
    inp = _scan_inputs(x, dt, A, B, C, D, z, dt_bias, initial_states, reverse, chunk_size,
                       dt_softplus, dt_limit, return_final_states)
    # The op chooses its own precision (fp32 accumulation); autocast would hand its matmuls
    # mixed dtypes.
    with torch.autocast(device_type=x[0].device.type, enabled=False):
        ys, finals = _backend(backend).forward(inp)
    return [*ys, *finals]


_scan_op = torch.library.custom_op('dinomamba_mm::ssd_scan', _scan, mutates_args=())


@_scan_op.register_fake
def _scan_fake(x, dt, A, B, C, D, z, dt_bias, initial_states, reverse, chunk_size, dt_softplus,
               dt_limit, return_final_states, backend):
    batch, _, heads, headdim = x[0].shape
    finals = [x[0].new_empty((batch, heads, headdim, B[0].shape[3]), dtype=compute_dtype(x[0]))
              ] if return_final_states else []
    return [*(t.new_empty(t.shape) for t in x), *finals]


def _scan_backward(douts: List[Optional[Tensor]], d_final: Optional[Tensor], x: List[Tensor],
                   dt: List[Tensor], A: List[Tensor], B: List[Tensor], C: List[Tensor],
                   D: List[Optional[Tensor]], z: List[Optional[Tensor]],
                   dt_bias: List[Optional[Tensor]], initial_states: List[Optional[Tensor]],
                   reverse: List[bool], chunk_size: int, dt_softplus: bool,
                   dt_limit: List[float], backend: str) -> List[Tensor]:
    """Gradients of the inputs that are not None (``ScanInputs.present`` order) from those of y
    and of the final state (None where they got none)."""
    inp = _scan_inputs(x, dt, A, B, C, D, z, dt_bias, initial_states, reverse, chunk_size,
                       dt_softplus, dt_limit, d_final is not None)
    d_finals = [d_final] + [None] * (len(x) - 1)
    with torch.autocast(device_type=x[0].device.type, enabled=False):
        grads = _backend(backend).backward(inp, douts, d_finals)
    # an op's outputs must not share memory (the backends hand out both directions' gradients
    # as views of one buffer where they can), and compiled graphs expect the fake's strides
    storages = set()
    for i, g in enumerate(grads):
        if g.untyped_storage().data_ptr() in storages or not g.is_contiguous():
            grads[i] = g = g.clone(memory_format=torch.contiguous_format)
        storages.add(g.untyped_storage().data_ptr())
    return grads


_scan_backward_op = torch.library.custom_op('dinomamba_mm::ssd_scan_backward', _scan_backward,
                                            mutates_args=())


@_scan_backward_op.register_fake
def _scan_backward_fake(douts, d_final, x, dt, A, B, C, D, z, dt_bias, initial_states, *rest):
    return [t.new_empty(t.shape) for group in (x, dt, A, B, C, D, z, dt_bias, initial_states)
            for t in group if t is not None]


_TENSOR_ARGS = len(ScanInputs.TENSORS)


def _setup_context(ctx, inputs, output) -> None:
    tensors, options = inputs[:_TENSOR_ARGS], inputs[_TENSOR_ARGS:]
    reverse, chunk_size, dt_softplus, dt_limit, return_final_states, backend = options
    ctx.set_materialize_grads(False)
    ctx.lengths = [len(group) for group in tensors]
    ctx.save_for_backward(*(t for group in tensors for t in group))
    ctx.options = (reverse, chunk_size, dt_softplus, dt_limit)
    ctx.directions, ctx.final, ctx.backend = len(reverse), return_final_states, backend


def _backward(ctx, grads):
    saved = list(ctx.saved_tensors)
    groups = []
    for n in ctx.lengths:
        groups.append(saved[:n])
        saved = saved[n:]
    n = ctx.directions
    douts, d_final = list(grads[:n]), grads[n] if ctx.final else None
    found = iter(_scan_backward_op(douts, d_final, *groups, *ctx.options, ctx.backend))
    # a list holding None is one leaf for the op's autograd wrapper: its gradient is one None
    return (*(None if None in group else [next(found) for _ in group] for group in groups),
            *(None,) * 6)


_scan_op.register_autograd(_backward, setup_context=_setup_context)


def _scan_reference(x, dt, A, B, C, D, z, dt_bias, initial_states, reverse, chunk_size,
                    dt_softplus, dt_limit, return_final_states, backend) -> List[Tensor]:
    """The op as the chunked einsum listing of ``reference.py`` in the compute dtype, for
    exporters that cannot call a custom op (ONNX): no buffers, no data-dependent shortcuts."""
    from .reference import ssd_chunked_reference
    ys, finals = [], []
    for k in range(len(x)):
        out = ssd_chunked_reference(x[k], dt[k], A[k], B[k], C[k], chunk_size, D[k], z[k],
                                    dt_bias[k], dt_softplus, tuple(dt_limit), initial_states[k],
                                    True, reverse[k], compute_dtype(x[k]))
        ys.append(out[0].to(x[k].dtype))
        finals.append(out[1])
    return ys + (finals if return_final_states else [])


def export_decompositions() -> dict:
    """``ExportedProgram.run_decompositions`` table that lowers the scan op to ATen ops (the
    chunked reference), for ``torch.onnx.export`` of an exported program."""
    return {torch.ops.dinomamba_mm.ssd_scan.default: _scan_reference}


def _run(directions: Sequence[dict], reverse: Sequence[bool], chunk_size: int,
         dt_softplus: bool, dt_limit, return_final_states: bool, impl: Optional[str]):
    """The op over validated per-direction tensors (dicts of ScanInputs.TENSORS names)."""
    x = directions[0]['x']
    tensors = [[d[name] for d in directions] for name in ScanInputs.TENSORS]
    return _scan_op(*tensors, list(reverse), chunk_size, dt_softplus,
                    [float(dt_limit[0]), float(dt_limit[1])], return_final_states,
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
    """SSD scan over a sequence (Mamba-2's ``mamba_chunk_scan_combined`` semantics).

    Args:
        x: (B, L, H, P) inputs.
        dt: (B, L, H) step sizes (before ``dt_bias`` / softplus / ``dt_limit``).
        A: (H,) decay rates, negative for a stable scan.
        B: (B, L, G, N) input projections, H % G == 0; head h reads group h // (H // G).
        C: (B, L, G, N) output projections.
        chunk_size: chunk length of the chunked algorithm (the result does not depend on it).
            The torch backend cuts the sequence into ceil(L / chunk_size) chunks of equal length
            (at most chunk_size); 64, the default, is where its CPU time is lowest
            (``tools/benchmarks/ssd.py --chunk-sweep``). The Triton kernels use the largest power
            of two in [16, 64] not above it (tl.dot needs 16; 64 keeps a chunk's tiles in
            registers).
        D: (H,) or (H, P) skip term D * x, optional.
        z: (B, L, H, P) gate: y * silu(z), optional.
        dt_bias: (H,) added to dt, optional.
        dt_softplus: softplus on dt + dt_bias.
        dt_limit: (min, max) clamp on dt' (skipped for the default (0, inf)).
        initial_states: (B, H, P, N) incoming state, zeros if None.
        return_final_states: also return the (B, H, P, N) final state (float32; float64 for
            float64 x).
        reverse: scan from the last token to the first.
        impl: None / 'auto', 'torch' or 'triton' (see :func:`select_backend`).

    Returns:
        y (B, L, H, P) in x's dtype, and final_states (B, H, P, N) when asked for.
    """
    _validate(x, dt, A, B, C, chunk_size, D, z, dt_bias, dt_limit, initial_states)
    out = _run([dict(x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=dt_bias,
                     initial_states=initial_states)], [bool(reverse)], chunk_size, dt_softplus,
               dt_limit, return_final_states, impl)
    return (out[0], out[1]) if return_final_states else out[0]


def _as_pair(name: str, value) -> Tuple:
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f'{name} must be a tensor or a (forward, backward) pair, got a '
                             f'sequence of length {len(value)}')
        return tuple(value)
    return value, value


def ssd_scan_bidirectional(
    x: Pair,
    dt: Pair,
    A: Pair,
    B: Pair,
    C: Pair,
    chunk_size: int = 64,
    D: Optional[Pair] = None,
    z: Optional[Pair] = None,
    dt_bias: Optional[Pair] = None,
    dt_softplus: bool = False,
    dt_limit: Tuple[float, float] = (0.0, float('inf')),
    impl: Optional[str] = None,
) -> Tuple[Tensor, Tensor]:
    """Forward and reverse scans of one sequence, as a bidirectional vision mixer needs them,
    in one pass of every stage.

    Each of x, dt, A, B, C, D, z, dt_bias is either one tensor shared by both directions or a
    pair (forward_value, backward_value) with the shapes of :func:`ssd_scan`; the two x must have
    the same shape. Everything, inputs and outputs, is in input token order: the backward output
    is ``ssd_scan(..., reverse=True)`` of the backward values, and the caller never flips.

    Returns:
        (y_fwd, y_bwd), each (B, L, H, P) in x's dtype.
    """
    pairs = {name: _as_pair(name, value) for name, value in
             (('x', x), ('dt', dt), ('A', A), ('B', B), ('C', C), ('D', D), ('z', z),
              ('dt_bias', dt_bias), ('initial_states', None))}
    directions = [{name: pair[i] for name, pair in pairs.items()} for i in range(2)]
    for d, direction in zip(directions, ('forward', 'backward')):
        _validate(*(d[n] for n in ('x', 'dt', 'A', 'B', 'C')), chunk_size,
                  *(d[n] for n in ('D', 'z', 'dt_bias')), dt_limit, None,
                  prefix=f'{direction} ')
    for name, (fwd, bwd) in pairs.items():  # one set of strides and dtypes for both directions
        if (fwd is None) != (bwd is None):
            raise ValueError(f'{name} must be given for both directions or for neither')
        if fwd is not None and (fwd.shape, fwd.dtype, fwd.device) != (bwd.shape, bwd.dtype,
                                                                       bwd.device):
            raise ValueError(f'forward and backward {name} must match in shape, dtype and '
                             f'device, got {_shape(fwd)} {fwd.dtype} {fwd.device} and '
                             f'{_shape(bwd)} {bwd.dtype} {bwd.device}')
    y_fwd, y_bwd = _run(directions, [False, True], chunk_size, dt_softplus, dt_limit, False,
                        impl)[:2]
    return y_fwd, y_bwd


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
    """Materialised token-mixing matrix of the scan (L^2 memory; for analysis).

    Args:
        dt: (B, L, H); A: (H,); B, C: (B, L, G, N); the rest as in :func:`ssd_scan`.

    Returns:
        M (B, H, L, L) float32 with ``y = einsum('bhij,bjhp->bihp', M, x) + D * x`` (before the z
        gate) for the scan of any x with these dt, A, B, C.
    """
    batch, length, heads = _tensor_shape('dt', dt, 3, '(B, L, H)')
    _tensor_shape('B', B, 4, '(B, L, G, N)')
    probe = B.new_empty(batch, length, heads, 1)  # x's role in the shared checks
    _validate(probe, dt, A, B, C, 1, None, None, dt_bias, dt_limit, None)
    return mixing_matrix(dt, A, B, C, dt_bias, dt_softplus, tuple(dt_limit), reverse)
