"""The SSD scan by mamba_ssm's own Triton kernels (the Dino-Mamba paper trained with them), one
call of ``mamba_chunk_scan_combined``'s forward or backward per direction, for the op in
``api.py``.

mamba_ssm scans forward only: a reverse direction runs on its token-wise inputs (x, dt, B, C, z)
flipped along the tokens, and its y and their gradients are flipped back, as the paper's mixer
does; its final state is then the state after token 0.

The functions called are the two that mamba_ssm's own autograd.Function calls,
``_mamba_chunk_scan_combined_fwd`` and ``_mamba_chunk_scan_combined_bwd`` (mamba_ssm 2.x): they
run inside our custom op, so that torch.compile and torch.export see one opaque node (tracing
into mamba_ssm's launch code would break the graph at every call) and the op's backward calls
:func:`backward`. mamba_ssm's backward reads the scan's output before the gate: without a gate it
is the op's output, which the op keeps for this backend; with a gate it is recomputed (one more
forward per direction).

One difference from our backends: mamba_ssm clamps dt' to ``dt_limit`` also for the default
(0, inf), so a negative dt' (possible without softplus: a growing state, see ``api.py``) counts
as 0 there.

``forward`` and ``backward`` take a :class:`ScanInputs` (validated by ``api.py``, which sends
float64 inputs and empty batches to the torch backend) and run on CUDA tensors, or on CPU tensors
when mamba_ssm's kernels were defined under ``TRITON_INTERPRET=1`` (the tests do that, with shims
for its CUDA-only launch code).
"""
import functools
import importlib
from types import ModuleType
from typing import Dict, List, Optional, Tuple

import torch

from .scan_inputs import ScanInputs

Tensor = torch.Tensor

#: inputs that run along the tokens: flipped for a reverse direction, their gradients too
TOKEN_WISE = ('x', 'dt', 'B', 'C', 'z')
_ENTRY_POINTS = ('_mamba_chunk_scan_combined_fwd', '_mamba_chunk_scan_combined_bwd')


@functools.lru_cache(maxsize=None)
def kernels() -> ModuleType:
    """mamba_ssm's ``mamba_ssm.ops.triton.ssd_combined``; raises what its import raises (its
    package imports the CUDA extension ``selective_scan_cuda`` first), or ImportError when it
    lacks the functions called here."""
    module = importlib.import_module('mamba_ssm.ops.triton.ssd_combined')
    missing = [name for name in _ENTRY_POINTS if not hasattr(module, name)]
    if missing:
        raise ImportError(f'mamba_ssm.ops.triton.ssd_combined has no {", ".join(missing)} '
                          '(mamba_ssm 2.x has them)')
    return module


def _interpreted(module: ModuleType) -> bool:
    """Whether mamba_ssm's kernels were defined under TRITON_INTERPRET=1 (``@triton.jit``
    decides when a kernel is defined)."""
    from triton.runtime.interpreter import InterpretedFunction
    kernel = module._chunk_scan_chunk_state_bwd_dx_kernel  # an Autotuner around the kernel
    return isinstance(getattr(kernel, 'fn', kernel), InterpretedFunction)


def _device(inp: ScanInputs) -> ModuleType:
    """mamba_ssm's module, after checking that its kernels can run on x."""
    module = kernels()
    x = inp.x
    if x.is_cuda:
        return module
    if not _interpreted(module):
        raise ValueError(
            f"impl='mamba_ssm' runs mamba_ssm's Triton kernels, which need CUDA tensors: x is "
            f"on {x.device}. Move the tensors to a CUDA device, or pass impl='torch' (or None, "
            'which chooses torch on the CPU)')
    if x.dtype == torch.bfloat16:
        raise ValueError('x has dtype torch.bfloat16, which the Triton interpreter '
                         '(TRITON_INTERPRET=1) cannot compute on CPU: pass float32 or float16 '
                         "tensors, or use impl='torch'")
    return module


def _flip(t: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """t (B, L, ...) reversed along the tokens (into ``out`` if given)."""
    tokens = torch.arange(t.shape[1] - 1, -1, -1, device=t.device)
    return torch.index_select(t, 1, tokens, out=out)


def _direction(inp: ScanInputs, k: int) -> Dict[str, Optional[Tensor]]:
    """Direction k's tensors as mamba_ssm scans them: token-wise ones flipped if it is reverse,
    D with contiguous channels (its backward asserts it)."""
    args = {name: inp.per_direction(name)[k] for name in ScanInputs.TENSORS}
    if inp.reverse[k]:
        args.update({name: _flip(args[name]) for name in TOKEN_WISE if args[name] is not None})
    if args['D'] is not None:
        args['D'] = args['D'].contiguous()
    return args


def _options(inp: ScanInputs) -> dict:
    return dict(dt_softplus=inp.dt_softplus, dt_limit=inp.dt_limit)


def _forward_call(module: ModuleType, args: dict, inp: ScanInputs) -> Tuple[Tensor, ...]:
    """(out, out before the gate (None without a gate), final state) of one direction in its
    scan order."""
    out, out_x, _, _, _, final = module._mamba_chunk_scan_combined_fwd(
        args['x'], args['dt'], args['A'], args['B'], args['C'], inp.chunk_size, D=args['D'],
        z=args['z'], dt_bias=args['dt_bias'], initial_states=args['initial_states'],
        **_options(inp))[:6]
    return out, out_x, final


def forward(inp: ScanInputs) -> Tuple[Tensor, Optional[Tensor]]:
    """y (K, B, L, H, P) in x's dtype and, if asked for, the final states (K, B, H, P, N)
    float32."""
    module = _device(inp)
    directions, batch, _, heads, headdim = inp.x.shape
    y = inp.x.new_empty(inp.x.shape)
    finals = inp.x.new_empty((directions, batch, heads, headdim, inp.B.shape[-1]),
                             dtype=torch.float32) if inp.return_final_states else None
    for k, reverse in enumerate(inp.reverse):
        out, _, final = _forward_call(module, _direction(inp, k), inp)
        if reverse:
            _flip(out, out=y[k])
        else:
            y[k].copy_(out)
        if finals is not None:
            finals[k].copy_(final)
    return y, finals


def backward(inp: ScanInputs, dy: Optional[Tensor], d_final: Optional[Tensor],
             y: Optional[Tensor] = None) -> List[Tensor]:
    """Gradients of :meth:`ScanInputs.present` (stacked, in their inputs' dtypes) from those
    of y (K, B, L, H, P) and of the final states (K, B, H, P, N), each None where they got
    none. ``y``: the op's output, which is the output before the gate when there is no gate
    (recomputed when None)."""
    module = _device(inp)
    grads = {name: torch.empty_like(t, memory_format=torch.contiguous_format)
             for name in ScanInputs.TENSORS if (t := getattr(inp, name)) is not None}
    for k, reverse in enumerate(inp.reverse):
        args = _direction(inp, k)
        turn = _flip if reverse else (lambda t: t)
        dout = torch.zeros_like(inp.x[k]) if dy is None else turn(dy[k].to(inp.x.dtype))
        if y is not None and inp.z is None:
            out = turn(y[k])
        else:
            out, out_x, _ = _forward_call(module, args, inp)
            out = out if out_x is None else out_x
        found = module._mamba_chunk_scan_combined_bwd(
            dout, args['x'], args['dt'], args['A'], args['B'], args['C'], out, inp.chunk_size,
            D=args['D'], z=args['z'], dt_bias=args['dt_bias'],
            initial_states=args['initial_states'],
            dfinal_states=None if d_final is None else d_final[k], **_options(inp))
        for name, g in zip(ScanInputs.TENSORS, found):
            if name not in grads:
                continue
            if reverse and name in TOKEN_WISE:
                _flip(g.to(grads[name].dtype), out=grads[name][k])
            else:
                grads[name][k].copy_(g)
    return [grads[name] for name in ScanInputs.TENSORS if name in grads]
