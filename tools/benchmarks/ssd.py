"""Benchmark the bidirectional SSD scan as the vision mixer calls it, against the baselines.

Side by side in one run, for each shape (B, L, H, P, N): ``ours`` (``ssd_scan_directions`` with
both directions stacked, the dispatching public op), ``minimal x2`` (the Mamba-2 paper's minimal
chunked SSD listing, run once per direction on flipped copies, zero padded to whole chunks),
``sequential`` (the float64 token-by-token recurrence the tests trust, forward + backward where
its autograd tape fits), ``mamba_ssm x2`` on CUDA when mamba_ssm imports, and with
``--baseline FILE`` the bidirectional scan of a module file that exposes ``ssd_scan_directions``
(or the ``ssd_scan_bidirectional`` of commits before it), e.g. one importing the ops/ssd package
of another commit (a change timed next to the code it replaces). Wall and process CPU time are
medians over rounds in which the methods take turns; peak memory and the --malloc modes:
docs/benchmarks.md.

Usage:
  python tools/benchmarks/ssd.py [--quick] [--threads 1] [--no-sequential] [--repeats N]
  python tools/benchmarks/ssd.py --inference      # no-grad forward at DinoVim-T's mixer shapes
  python tools/benchmarks/ssd.py --chunk-sweep    # our CPU path for several chunk sizes
  python tools/benchmarks/ssd.py --malloc adaptive   # glibc's default, as a training process
  python tools/benchmarks/ssd.py --device cuda
  python tools/benchmarks/ssd.py --quick --baseline before.py  # before.py: imports an older ops/ssd
"""
import argparse
import functools
import importlib.util
import os.path as osp
import statistics
import sys
from typing import Callable, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from benchmark_utils import (PeakMemory, Timer, add_malloc_option, fmt,  # noqa: E402
                             machine_line, pin_malloc, table_header, table_row)

from dinomamba_mm.ops.ssd import ssd_scan_directions  # noqa: E402
from dinomamba_mm.ops.ssd.naive import ssd_scan_naive  # noqa: E402
from dinomamba_mm.ops.ssd.reference import segment_sums  # noqa: E402

# (B, L, H, P, N); the long sequences use a smaller batch so that the minimal listing fits
FULL_SHAPES = [(8, 197, 24, 64, 64), (8, 785, 24, 64, 64), (8, 3137, 24, 64, 64),
               (2, 4096, 24, 64, 64), (1, 16384, 24, 64, 64)]
QUICK_SHAPES = [(8, 197, 24, 64, 64), (2, 4096, 24, 64, 64)]
# the mixer call of DinoVim-T at 224 x 224 px (14 x 14 patches + cls) and at detection
# resolution (1024 x 1024 px: 64 x 64 patches + cls)
INFERENCE_SHAPES = [(1, 197, 8, 64, 64), (1, 4097, 8, 64, 64)]
CHUNK = 256  # the minimal listing's chunk (and mamba_ssm's)
OURS_CHUNK = 64  # the op's default chunk_size: the fastest on the CPU (--chunk-sweep)
SEQUENTIAL_BACKWARD_MAX_BYTES = 2 * 2**30  # autograd keeps every state of the sequential scan
SEQUENTIAL_MAX_L = 3137  # a Python step per token: minutes beyond this
LONG = 785  # above this: one timed round, no warm-up (minutes per call on 2 cores)
MINIMAL = 'minimal x2 (flips)'
MAMBA_SSM = 'mamba_ssm x2 (flips)'


def minimal_chunked_ssd(X, A, B, C, block_len):
    """The paper's minimal SSD: X (b, l, h, p) = dt * x, A (b, l, h) = dt * A, B, C (b, l, h, n)."""
    b, l, h, p = X.shape
    X, A, B, C = (t.reshape(b, l // block_len, block_len, *t.shape[2:]) for t in (X, A, B, C))
    A = A.permute(0, 3, 1, 2)  # b h c l
    A_cumsum = torch.cumsum(A, dim=-1)
    decay_in_chunk = torch.exp(segment_sums(A))
    Y_diag = torch.einsum('bclhn,bcshn,bhcls,bcshp->bclhp', C, B, decay_in_chunk, X)
    decay_to_end = torch.exp(A_cumsum[..., -1:] - A_cumsum)
    states = torch.einsum('bclhn,bhcl,bclhp->bchpn', B, decay_to_end, X)
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
    decay_between = torch.exp(segment_sums(F.pad(A_cumsum[..., -1], (1, 0))))
    states = torch.einsum('bhzc,bchpn->bzhpn', decay_between, states)[:, :-1]
    Y_off = torch.einsum('bclhn,bchpn,bhcl->bclhp', C, states, torch.exp(A_cumsum))
    return (Y_diag + Y_off).reshape(b, l, h, p)


def _minimal_one_direction(x, dt, A, B, C, D, dt_bias):
    length, heads = x.shape[1], x.shape[2]
    dt = F.softplus(dt + dt_bias)
    pad = (-length) % CHUNK  # dt = 0 past the end leaves the scan unchanged
    Xp, dtp, Bp, Cp = (F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad)) for t in
                       (x * dt[..., None], dt, B.expand(-1, -1, heads, -1),
                        C.expand(-1, -1, heads, -1)))
    return minimal_chunked_ssd(Xp, dtp * A, Bp, Cp, CHUNK)[:, :length] + x * D[:, None]


def _two_calls(one_direction, x, dt, A, B, C, D, dt_bias):
    """Both directions, one call each; the backward one on flipped copies, flipped back."""
    flip = [lambda t: t, lambda t: t.flip(1)]
    return tuple(flip[k](one_direction(flip[k](x[k]), flip[k](dt[k]), A[k], flip[k](B[k]),
                                       flip[k](C[k]), D[k], dt_bias[k])) for k in range(2))


def minimal_bidirectional(**inputs):
    return _two_calls(_minimal_one_direction, **inputs)


def sequential_bidirectional(x, dt, A, B, C, D, dt_bias):
    return tuple(ssd_scan_naive(x[i], dt[i], A[i], B[i], C[i], D=D[i], dt_bias=dt_bias[i],
                                dt_softplus=True, reverse=bool(i)) for i in range(2))


def ours_bidirectional(x, dt, A, B, C, D, dt_bias, chunk_size=OURS_CHUNK):
    return ssd_scan_directions(x, dt, A, B, C, reverse=(False, True), chunk_size=chunk_size,
                               D=D, dt_bias=dt_bias, dt_softplus=True)


ours_bidirectional.stacked = True  # takes (2, ...) stacks, not per-direction pairs


def ours_at(chunk_size: int) -> Callable:
    """``ours_bidirectional`` at ``chunk_size``, still marked as taking stacks."""
    ours = functools.partial(ours_bidirectional, chunk_size=chunk_size)
    ours.stacked = True
    return ours


def load_baseline(path: str) -> Callable:
    """The bidirectional scan of the standalone module file ``path``, wrapped as a method:
    its ``ssd_scan_directions`` on stacked inputs, or the ``ssd_scan_bidirectional`` (pairs of
    tensors) of the commits before it."""
    spec = importlib.util.spec_from_file_location('ssd_baseline', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if hasattr(module, 'ssd_scan_directions'):
        def baseline_bidirectional(x, dt, A, B, C, D, dt_bias):
            return module.ssd_scan_directions(x, dt, A, B, C, reverse=(False, True),
                                              chunk_size=OURS_CHUNK, D=D, dt_bias=dt_bias,
                                              dt_softplus=True)

        baseline_bidirectional.stacked = True
        return baseline_bidirectional

    def baseline_pairs(x, dt, A, B, C, D, dt_bias):
        return module.ssd_scan_bidirectional(x, dt, A, B, C, chunk_size=OURS_CHUNK, D=D,
                                             dt_bias=dt_bias, dt_softplus=True)

    return baseline_pairs


def mamba_ssm_bidirectional(**inputs):
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    return _two_calls(lambda x, dt, A, B, C, D, dt_bias: mamba_chunk_scan_combined(
        x, dt, A, B, C, chunk_size=CHUNK, D=D, dt_bias=dt_bias, dt_softplus=True), **inputs)


def make_inputs(shape, device, dtype, seed=0):
    """Per-direction pairs of tensors (G = 1 group); a method that takes stacks gets them
    stacked (``_leaves``), as the bidirectional mixer passes them."""
    batch, length, heads, headdim, dstate = shape
    gen = torch.Generator().manual_seed(seed)

    def rnd(*size, scale=1.0):
        return (torch.randn(*size, generator=gen) * scale).to(device=device, dtype=dtype)

    def per_head(low, high):
        return torch.empty(heads).uniform_(low, high, generator=gen).to(device)

    inputs = dict(x=lambda: rnd(batch, length, heads, headdim),
                  dt=lambda: rnd(batch, length, heads, scale=0.5),
                  B=lambda: rnd(batch, length, 1, dstate, scale=dstate**-0.5),
                  C=lambda: rnd(batch, length, 1, dstate, scale=dstate**-0.5),
                  A=lambda: -per_head(1, 16), D=lambda: torch.ones(heads, device=device),
                  dt_bias=lambda: per_head(-4, -1))
    return {name: (make(), make()) for name, make in inputs.items()}


def _leaves(inputs, grad: bool, fn: Callable):
    """Fresh leaves of the per-direction pairs, or of their (2, ...) stacks for a method that
    takes stacks (``fn.stacked``)."""
    if getattr(fn, 'stacked', False):
        return {k: torch.stack(v).requires_grad_(grad) for k, v in inputs.items()}
    return {k: tuple(t.detach().clone().requires_grad_(grad) for t in v)
            for k, v in inputs.items()}


def _output_gradients(out, stacked: bool):
    """(outputs, their gradients) for the loss y_fwd.sum() + 2 y_bwd.sum(): the gradients as
    stride-0 expansions (no memory), whether the outputs are a pair or a (2, ...) stack."""
    weights = torch.tensor([1.0, 2.0], dtype=out[0].dtype, device=out[0].device)
    if stacked:
        return [out], [weights.view(2, *(1, ) * (out.dim() - 1)).expand(out.shape)]
    return list(out), [w.expand(o.shape) for w, o in zip(weights, out)]


def call_once(fn: Callable, inputs, device, backward: bool,
              memory: bool = True) -> Tuple[float, float, float]:
    """(wall seconds, process CPU seconds, peak MiB) of fn, plus a backward through every input;
    the MiB are nan without ``memory`` (when freed buffers stay in the process)."""
    args = _leaves(inputs, backward, fn)
    with PeakMemory(device) as mem, Timer(device) as timer, torch.set_grad_enabled(backward):
        out = fn(**args)
        if backward:
            torch.autograd.backward(*_output_gradients(out, getattr(fn, 'stacked', False)))
        del out, args
    return timer.wall, timer.cpu, mem.mib if memory else float('nan')


def measure_interleaved(methods, inputs, device, backward: bool, repeats: int, warmup: bool,
                        memory: bool = True):
    """Per method: median wall s, median CPU s, max peak MiB (nan without ``memory``). The
    methods take turns in every round, so load changes on a shared machine hit them alike."""
    samples = {name: [] for name, _ in methods}
    for round_ in range(repeats + int(warmup)):
        for name, fn in methods:
            result = call_once(fn, inputs, device, backward, memory)
            if round_ >= int(warmup):
                samples[name].append(result)
    return {name: (statistics.median(s[0] for s in runs), statistics.median(s[1] for s in runs),
                   max(s[2] for s in runs)) for name, runs in samples.items()}


def _sequential_fits(shape) -> bool:
    batch, length, heads, headdim, dstate = shape
    return 2 * 8 * batch * length * heads * headdim * dstate < SEQUENTIAL_BACKWARD_MAX_BYTES


def _max_relative_difference(inputs, candidates: List[Tuple[str, Callable]]) -> float:
    """Largest difference of the candidates' forward outputs to the first one's, relative to its
    largest magnitude."""
    def outputs(fn):
        return [y.float() for y in fn(**_leaves(inputs, False, fn))]

    with torch.no_grad():
        ref = outputs(candidates[0][1])
        return max([0.0] + [((a - b).abs().max() / a.abs().max()).item()
                            for _, fn in candidates[1:] for a, b in zip(ref, outputs(fn))])


def _ratio(reference: float, value: float) -> str:
    return 'n/a' if value != value else f'{reference / value:.2f}x'


def timing_rounds(length: int, device: torch.device, repeats: int) -> Tuple[int, bool]:
    """(timed rounds, whether a warm-up round precedes them) for sequences of ``length``: on
    CPU one round without warm-up above LONG tokens; a GPU always gets the warm-up (its first
    call compiles and autotunes the Triton kernels) and ``repeats`` rounds."""
    if device.type == 'cpu' and length > LONG:
        return 1, False
    return repeats, True


def run(shapes, device: torch.device, dtype: torch.dtype, repeats: int, with_sequential: bool,
        with_mamba_ssm: bool, baseline: Optional[Callable] = None, memory: bool = True,
        backward: bool = True, chunk_sizes: Sequence[int] = (OURS_CHUNK, ),
        with_minimal: bool = True) -> None:
    """One table row per (shape, method): forward and, with ``backward``, forward + backward;
    ours once per chunk size of ``chunk_sizes``. The speed-ups are against the minimal listing,
    or without it (``with_minimal=False``) against mamba_ssm x2."""
    memory_kind = ('torch.cuda.max_memory_allocated growth' if device.type == 'cuda'
                   else 'peak RSS growth' if memory else
                   "n/a (glibc's adaptive mmap threshold: freed buffers stay in the process)")
    reference = MINIMAL if with_minimal else MAMBA_SSM
    if reference == MAMBA_SSM and not with_mamba_ssm:
        raise ValueError('with_minimal=False needs with_mamba_ssm=True: the speed-ups are '
                         'against mamba_ssm x2 then')
    print(f'# machine: {machine_line(device)}')
    print(f'# dtype {dtype}, chunk_size {" / ".join(map(str, chunk_sizes))} (ours) / {CHUNK} '
          f'(minimal, mamba_ssm), G = 1, D, dt_bias, dt_softplus; both directions; '
          f'{"forward + backward" if backward else "no-grad forward"}; median of {repeats} '
          f'interleaved rounds after a warm-up one'
          f'{f" (on CPU 1, without, for L > {LONG})" if device.type == "cpu" else ""}; '
          f'memory = {memory_kind}; speed-up = {reference} / method')
    print('# ms = wall clock; cpu ms = process CPU time (all threads), steadier on a shared '
          'machine')
    phases = ('fwd', 'fwd+bwd') if backward else ('fwd', )
    print(table_header(['B', 'L', 'H', 'method'] + [
        f'{phase} {column}' for phase in phases for column in ('ms', 'cpu ms', 'MiB')] + [
        f'speed-up {phase} (wall / cpu)' for phase in phases]))
    for shape in shapes:
        rounds, warmup = timing_rounds(shape[1], device, repeats)
        inputs = make_inputs(shape, device, dtype)
        methods: List[Tuple[str, Callable]] = [
            ('ours' if len(chunk_sizes) == 1 else f'ours chunk {chunk}',
             ours_at(chunk)) for chunk in chunk_sizes]
        methods += [('baseline', baseline)] if baseline is not None else []
        methods += [(MAMBA_SSM, mamba_ssm_bidirectional)] if with_mamba_ssm else []
        methods += [(MINIMAL, minimal_bidirectional)] if with_minimal else []
        sequential = with_sequential and shape[1] <= SEQUENTIAL_MAX_L
        times = {}
        for phase in phases:
            timed = methods + ([('sequential', sequential_bidirectional)] if sequential and (
                phase == 'fwd' or _sequential_fits(shape)) else [])
            times[phase] = measure_interleaved(timed, inputs, device, phase != 'fwd', rounds,
                                               warmup, memory)
        nan3 = (float('nan'), ) * 3
        for name in times['fwd']:
            cells = [times[phase].get(name, nan3) for phase in phases]
            print(table_row([*shape[:3], name] + [
                f'{fmt(c[0], 1e3, 1)} | {fmt(c[1], 1e3, 1)} | {fmt(c[2])}' for c in cells] + [
                f'{_ratio(times[p][reference][0], c[0])} / '
                f'{_ratio(times[p][reference][1], c[1])}'
                for p, c in zip(phases, cells)]), flush=True)
        agree = _max_relative_difference(inputs, methods)
        print(f'# B {shape[0]} L {shape[1]}: max relative difference of the forward outputs to '
              f'{methods[0][0]}: {agree:.1e}', flush=True)


def chunk_sweep(device: torch.device, repeats: int, memory: bool = True) -> None:
    """Fwd+bwd time of our CPU path for several chunk sizes (the reason for its default)."""
    print(f'# machine: {machine_line(device)}')
    print(table_header(['B', 'L', 'chunk size', 'fwd+bwd ms', 'fwd+bwd cpu ms', 'fwd+bwd MiB']))
    for shape in QUICK_SHAPES:
        inputs = make_inputs(shape, device, torch.float32)
        for chunk in (256, 128, 64, 48, 32):
            wall, cpu, mib = measure_interleaved([('ours', ours_at(chunk))], inputs, device, True,
                                                 repeats, True, memory)['ours']
            print(table_row([*shape[:2], chunk, fmt(wall, 1e3), fmt(cpu, 1e3), fmt(mib)]),
                  flush=True)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quick', action='store_true', help='B 8 L 197 and B 2 L 4096 only')
    parser.add_argument('--device', default='cpu', help='cpu or cuda')
    parser.add_argument('--repeats', type=int, default=3,
                        help='interleaved timing rounds per shape (1 at long L; default 3)')
    parser.add_argument('--no-sequential', action='store_true',
                        help='skip the token-by-token scan (slow at long L)')
    parser.add_argument('--chunk-sweep', action='store_true',
                        help='only time our CPU path for several chunk caps')
    parser.add_argument('--inference', action='store_true',
                        help='only the no-grad forward of the DinoVim-T mixer call')
    parser.add_argument('--threads', type=int, default=None,
                        help='torch intra-op threads (1 is steadier on a shared machine)')
    parser.add_argument('--baseline', metavar='FILE',
                        help='also time the bidirectional scan of this standalone module file')
    add_malloc_option(parser)  # memory n/a under 'adaptive'
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == 'cuda' and not torch.cuda.is_available():
        parser.error('--device cuda given but torch.cuda.is_available() is False')
    baseline = load_baseline(args.baseline) if args.baseline else None
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    memory = device.type == 'cuda' or args.malloc == 'pinned'
    if args.malloc == 'pinned':
        pin_malloc()
    if args.chunk_sweep:
        return chunk_sweep(device, args.repeats, memory)
    dtype = torch.bfloat16 if device.type == 'cuda' else torch.float32
    with_mamba = False
    if device.type == 'cuda' and not args.inference:
        with_mamba = importlib.util.find_spec('mamba_ssm') is not None
        if not with_mamba:
            print('# mamba_ssm is not importable: no mamba_chunk_scan_combined column')
    if args.inference:
        run(INFERENCE_SHAPES, device, dtype, args.repeats, False, False, baseline, memory,
            backward=False)
    else:
        run(QUICK_SHAPES if args.quick else FULL_SHAPES, device, dtype, args.repeats,
            not args.no_sequential, with_mamba, baseline, memory)


if __name__ == '__main__':
    main()
