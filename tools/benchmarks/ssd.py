"""Benchmark the bidirectional SSD scan as the vision mixer calls it.

Side by side in one run, for each shape (B, L, H, P, N):
  ours      ``ssd_scan_bidirectional`` (the dispatching public op; on CPU the chunked torch path)
  minimal   the Mamba-2 paper's minimal chunked SSD (einsum + segment-sum listing, written here),
            run twice with flipped copies for the backward direction; it needs L % chunk == 0, so
            its inputs are zero padded (dt = 0 past the end leaves the scan unchanged)
  sequential a token-by-token float32 recurrence (forward only where the autograd tape of L states
            would not fit; the table says so)
  products  (CPU) only the batched matrix products of ours, recorded in one call and replayed on
            warm operands of the same shapes and strides: the floor of ours on the machine, the
            time no reorganisation of its other work (masks, exponentials, layouts, allocation)
            can go below; its speed-up column is the most ours could reach against minimal
  baseline  with --baseline FILE: ``ssd_scan_bidirectional`` of a module file that exposes it,
            e.g. one importing the ops/ssd package of another commit (``git archive`` it into a
            folder under another name), so that a change is timed side by side with the code it
            replaces
Measured: wall time and process CPU time (medians over rounds in which the methods take turns) of
forward and of forward+backward (through every input), and peak memory. CPU peak memory = growth
of the process's peak resident set (VmHWM, reset through /proc/self/clear_refs before each call)
over the resident set before it, with glibc's mmap threshold pinned so that freed buffers go back
to the OS between calls; on CUDA it is torch.cuda.max_memory_allocated minus the memory allocated
before the call. That pinning makes every large buffer a fresh mapping whose pages the kernel
zeroes on first touch; ``--malloc adaptive`` leaves glibc's default (its mmap threshold rises
to the size of the buffers freed, so a long-running process reuses them), which is how a training
process runs: the times then exclude most page faults and the memory columns read n/a.
With --device cuda it also compares with mamba_ssm's mamba_chunk_scan_combined in bf16 (two calls
with flips) when mamba_ssm imports.

Usage:
  python tools/benchmarks/ssd.py            # the full table (long; minutes on 2 cores)
  python tools/benchmarks/ssd.py --quick    # a small subset
  python tools/benchmarks/ssd.py --device cuda
  python tools/benchmarks/ssd.py --chunk-sweep   # our CPU path for several chunk sizes
  python tools/benchmarks/ssd.py --inference     # only the DinoVim-T no-grad forward table
  python tools/benchmarks/ssd.py --quick --baseline FILE
  python tools/benchmarks/ssd.py --quick --malloc adaptive   # times without the pinning's page faults
  add --threads 1 on a shared machine (both methods then run single-threaded)
"""
import argparse
import ctypes
import gc
import importlib.util
import os
import platform
import statistics
import time
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from dinomamba_mm.ops.ssd import api, ssd_scan_bidirectional

# (B, L, H, P, N); the long sequences use a smaller batch so that the minimal listing fits
FULL_SHAPES = [(8, 197, 24, 64, 64), (8, 785, 24, 64, 64), (8, 3137, 24, 64, 64),
               (2, 4096, 24, 64, 64), (1, 16384, 24, 64, 64)]
QUICK_SHAPES = [(8, 197, 24, 64, 64), (2, 4096, 24, 64, 64)]
# the mixer call of DinoVim-T at 224 x 224 px (14 x 14 patches + cls) and at detection
# resolution (1024 x 1024 px: 64 x 64 patches + cls)
INFERENCE_SHAPES = [(1, 197, 8, 64, 64), (1, 4097, 8, 64, 64)]
CHUNK = 256  # the minimal listing's and mamba_ssm's chunk length
OURS_CHUNK = 64  # ours' default (see ssd_scan)
SEQUENTIAL_BACKWARD_MAX_BYTES = 2 * 2**30  # autograd keeps every state of the sequential scan
SEQUENTIAL_MAX_L = 3137  # a Python step per token: minutes beyond this
LONG = 785  # above this: one timed round, no warm-up (minutes per call on 2 cores)
PRODUCTS = "ours' products alone"


# ----------------------------------------------------------------------------- baselines
def _segment_sums(a: torch.Tensor) -> torch.Tensor:
    """(..., T) -> (..., T, T): sum of a[j+1 .. i] below the diagonal, -inf above it."""
    t = a.shape[-1]
    cumulative = torch.cumsum(a, dim=-1)
    sums = cumulative[..., :, None] - cumulative[..., None, :]
    lower = torch.tril(torch.ones(t, t, dtype=torch.bool, device=a.device))
    return sums.masked_fill(~lower, -torch.inf)


def minimal_chunked_ssd(X, A, B, C, block_len):
    """The paper's minimal SSD: X (b, l, h, p) = dt * x, A (b, l, h) = dt * A, B, C (b, l, h, n)."""
    b, l, h, p = X.shape
    c = l // block_len
    X, A, B, C = (t.reshape(b, c, block_len, *t.shape[2:]) for t in (X, A, B, C))
    A = A.permute(0, 3, 1, 2)  # b h c l
    A_cumsum = torch.cumsum(A, dim=-1)
    decay_in_chunk = torch.exp(_segment_sums(A))
    Y_diag = torch.einsum('bclhn,bcshn,bhcls,bcshp->bclhp', C, B, decay_in_chunk, X)
    decay_to_end = torch.exp(A_cumsum[..., -1:] - A_cumsum)
    states = torch.einsum('bclhn,bhcl,bclhp->bchpn', B, decay_to_end, X)
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
    decay_between = torch.exp(_segment_sums(F.pad(A_cumsum[..., -1], (1, 0))))
    states = torch.einsum('bhzc,bchpn->bzhpn', decay_between, states)[:, :-1]
    Y_off = torch.einsum('bclhn,bchpn,bhcl->bclhp', C, states, torch.exp(A_cumsum))
    return (Y_diag + Y_off).reshape(b, l, h, p)


def _minimal_one_direction(x, dt, A, B, C, D, dt_bias):
    length = x.shape[1]
    dt = F.softplus(dt + dt_bias)
    pad = (-length) % CHUNK
    heads = x.shape[2]
    Bh = B.expand(-1, -1, heads, -1)
    Ch = C.expand(-1, -1, heads, -1)
    Xp, dtp, Bp, Cp = (F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad))
                       for t in (x * dt[..., None], dt, Bh, Ch))
    y = minimal_chunked_ssd(Xp, dtp * A, Bp, Cp, CHUNK)[:, :length]
    return y + x * D[:, None]


def minimal_bidirectional(x, dt, A, B, C, D, dt_bias):
    """Both directions with the minimal listing; the backward one on flipped copies."""
    y_fwd = _minimal_one_direction(x[0], dt[0], A[0], B[0], C[0], D[0], dt_bias[0])
    flip = lambda t: t.flip(1)  # noqa: E731
    y_bwd = _minimal_one_direction(flip(x[1]), flip(dt[1]), A[1], flip(B[1]), flip(C[1]), D[1],
                                   dt_bias[1]).flip(1)
    return y_fwd, y_bwd


def _sequential_one_direction(x, dt, A, B, C, D, dt_bias, reverse):
    dt = F.softplus(dt + dt_bias)
    batch, length, heads, headdim = x.shape
    state = x.new_zeros(batch, heads, headdim, B.shape[-1])
    ys = [None] * length
    for t in (range(length - 1, -1, -1) if reverse else range(length)):
        decay = torch.exp(dt[:, t] * A)[:, :, None, None]
        state = decay * state + (dt[:, t, :, None] * x[:, t])[..., None] * B[:, t, :, None, :]
        ys[t] = (state @ C[:, t, :, :, None]).squeeze(-1)
    return torch.stack(ys, dim=1) + x * D[:, None]


def sequential_bidirectional(x, dt, A, B, C, D, dt_bias):
    return tuple(_sequential_one_direction(x[i], dt[i], A[i], B[i], C[i], D[i], dt_bias[i],
                                           reverse=bool(i)) for i in range(2))


def ours_bidirectional(x, dt, A, B, C, D, dt_bias):
    return ssd_scan_bidirectional(x, dt, A, B, C, chunk_size=OURS_CHUNK, D=D, dt_bias=dt_bias,
                                  dt_softplus=True)


class _RecordProducts(TorchDispatchMode):
    """Records the shape and strides of every batched matrix product run under it, by phase."""

    def __init__(self):
        super().__init__()
        self.phase = 'fwd'
        self.calls: Dict[str, List[Tuple]] = {'fwd': [], 'bwd': []}

    # the scan's custom ops: their Python bodies run under the mode, so that it sees their products
    SCAN_OPS = {torch.ops.dinomamba_mm.ssd_scan.default: api._scan,
                torch.ops.dinomamba_mm.ssd_scan_backward.default: api._scan_backward}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in self.SCAN_OPS:
            with self:
                return self.SCAN_OPS[func](*args, **(kwargs or {}))
        if func in (torch.ops.aten.bmm.default, torch.ops.aten.bmm.out):
            a, b = args[:2]
            self.calls[self.phase].append(((tuple(a.shape), a.stride()),
                                           (tuple(b.shape), b.stride())))
        return func(*args, **(kwargs or {}))


def record_products(call: Callable[[], Tuple[torch.Tensor, torch.Tensor]],
                    backward: bool) -> Dict[str, List[Tuple]]:
    """The batched products of ``call()`` (which returns (y_fwd, y_bwd)) and, with ``backward``,
    of a backward pass through it: per phase ('fwd', 'bwd'), ((shape, strides) of each operand)."""
    recorder = _RecordProducts()
    with recorder:
        y_fwd, y_bwd = call()
        if backward:
            recorder.phase = 'bwd'
            (y_fwd.sum() + 2 * y_bwd.sum()).backward()
    return recorder.calls


class ProductReplay:
    """Runs recorded batched products on operands of the same shapes and strides, allocated once
    per distinct product and reused in every run (warm, no other work).

    Args:
        calls (dict): per phase, the products of :func:`record_products`.
    """

    def __init__(self, calls: Dict[str, List[Tuple]]):
        self.calls = calls
        self.operands: Dict[Tuple, Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        for call in calls['fwd'] + calls['bwd']:
            if call not in self.operands:
                (a_shape, a_stride), (b_shape, b_stride) = call
                self.operands[call] = (torch.empty_strided(a_shape, a_stride).normal_(),
                                       torch.empty_strided(b_shape, b_stride).normal_(),
                                       torch.empty(a_shape[0], a_shape[1], b_shape[2]))
        self.gflop = {phase: sum(2 * a[0] * a[1] * a[2] * b[2] for (a, _), (b, _) in c) / 1e9
                      for phase, c in calls.items()}
        self.count = {phase: len(c) for phase, c in calls.items()}

    def run(self, phase: str) -> None:
        for call in self.calls[phase]:
            a, b, out = self.operands[call]
            torch.bmm(a, b, out=out)


class _Replayed(torch.autograd.Function):
    """Forward: the forward products of a replay; backward: its backward products."""

    @staticmethod
    def forward(ctx, replay: ProductReplay, x: torch.Tensor):
        ctx.replay = replay
        replay.run('fwd')
        return x.new_zeros(1), x.new_zeros(1)

    @staticmethod
    def backward(ctx, *grads):
        ctx.replay.run('bwd')
        return None, None


def products_of_ours(inputs) -> Callable:
    """A method that runs only the batched matrix products of ``ours`` (recorded in one forward +
    backward call on these inputs) through a :class:`ProductReplay`: the time of ours' products
    alone, with warm operands and no other work, a floor that no reorganisation of the other work
    can go below. Its forward runs the forward's products, its backward the backward's."""
    replay = ProductReplay(record_products(lambda: ours_bidirectional(**_leaves(inputs, True)),
                                           backward=True))

    def products_bidirectional(x, dt, A, B, C, D, dt_bias):
        return _Replayed.apply(replay, x[0])

    products_bidirectional.gflop, products_bidirectional.count = replay.gflop, replay.count
    return products_bidirectional


def load_baseline(path: str) -> Callable:
    """``ssd_scan_bidirectional`` of the module file ``path``, wrapped as a method."""
    spec = importlib.util.spec_from_file_location('ssd_baseline', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def baseline_bidirectional(x, dt, A, B, C, D, dt_bias):
        return module.ssd_scan_bidirectional(x, dt, A, B, C, chunk_size=OURS_CHUNK, D=D,
                                             dt_bias=dt_bias, dt_softplus=True)

    return baseline_bidirectional


def mamba_ssm_bidirectional(x, dt, A, B, C, D, dt_bias):
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    kw = dict(chunk_size=CHUNK, dt_softplus=True)
    y_fwd = mamba_chunk_scan_combined(x[0], dt[0], A[0], B[0], C[0], D=D[0], dt_bias=dt_bias[0],
                                      **kw)
    flip = lambda t: t.flip(1)  # noqa: E731
    y_bwd = mamba_chunk_scan_combined(flip(x[1]), flip(dt[1]), A[1], flip(B[1]), flip(C[1]),
                                      D=D[1], dt_bias=dt_bias[1], **kw).flip(1)
    return y_fwd, y_bwd


# ----------------------------------------------------------------------------- measuring
def _pin_malloc() -> None:
    """Keep glibc from caching big freed buffers, so that resident-set growth tracks allocation."""
    try:
        libc = ctypes.CDLL('libc.so.6')
    except OSError:
        return
    libc.mallopt(-3, 256 * 1024)  # M_MMAP_THRESHOLD (also disables the dynamic threshold)
    libc.mallopt(-1, 256 * 1024)  # M_TRIM_THRESHOLD


def _rss_kib(field: str) -> int:
    with open('/proc/self/status') as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1])
    raise RuntimeError(f'{field} not in /proc/self/status')


class PeakMemory:
    """Peak extra memory (MiB) of the code run inside the context."""

    def __init__(self, device: torch.device):
        self.device = device
        self.mib = float('nan')

    def __enter__(self):
        gc.collect()
        if self.device.type == 'cuda':
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            with open('/proc/self/clear_refs', 'w') as refs:
                refs.write('5')  # reset VmHWM to the current resident set
            self.base = _rss_kib('VmRSS') * 1024
        return self

    def __exit__(self, *exc):
        if self.device.type == 'cuda':
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
        else:
            peak = _rss_kib('VmHWM') * 1024
        self.mib = max(0.0, (peak - self.base) / 2**20)  # a growth: freed pages can read < 0


def make_inputs(shape, device, dtype, seed=0):
    """Per-direction tensors as the bidirectional mixer passes them (G = 1 group)."""
    batch, length, heads, headdim, dstate = shape
    gen = torch.Generator().manual_seed(seed)

    def rnd(*size, scale=1.0):
        return (torch.randn(*size, generator=gen) * scale).to(device=device, dtype=dtype)

    pairs = dict(
        x=[rnd(batch, length, heads, headdim) for _ in range(2)],
        dt=[rnd(batch, length, heads, scale=0.5) for _ in range(2)],
        B=[rnd(batch, length, 1, dstate, scale=dstate**-0.5) for _ in range(2)],
        C=[rnd(batch, length, 1, dstate, scale=dstate**-0.5) for _ in range(2)],
    )
    params = dict(
        A=[-torch.empty(heads).uniform_(1, 16, generator=gen).to(device) for _ in range(2)],
        D=[torch.ones(heads, device=device) for _ in range(2)],
        dt_bias=[torch.empty(heads).uniform_(-4, -1, generator=gen).to(device) for _ in range(2)],
    )
    return {k: tuple(v) for k, v in {**pairs, **params}.items()}


def _leaves(inputs: Dict[str, Tuple[torch.Tensor, torch.Tensor]], grad: bool):
    return {k: tuple(t.detach().clone().requires_grad_(grad) for t in v)
            for k, v in inputs.items()}


def _sync(device):
    if device.type == 'cuda':
        torch.cuda.synchronize()


def call_once(fn: Callable, inputs, device, backward: bool,
              memory: bool = True) -> Tuple[float, float, float]:
    """(wall seconds, process CPU seconds, peak MiB) of fn, plus a backward through every input;
    the MiB are nan without ``memory`` (when freed buffers stay in the process)."""
    args = _leaves(inputs, backward)
    gc.collect()
    with PeakMemory(device) as mem:
        _sync(device)
        wall, cpu = time.perf_counter(), time.process_time()
        with torch.set_grad_enabled(backward):
            y_fwd, y_bwd = fn(**args)
            if backward:
                (y_fwd.float().sum() + 2 * y_bwd.float().sum()).backward()
        _sync(device)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        del y_fwd, y_bwd, args
    return wall, cpu, mem.mib if memory else float('nan')


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
    return 2 * 4 * batch * length * heads * headdim * dstate < SEQUENTIAL_BACKWARD_MAX_BYTES


def _max_relative_difference(inputs, candidates: List[Tuple[str, Callable]]) -> float:
    """Largest difference of the candidates' forward outputs to the first one's, relative to its
    largest magnitude."""
    with torch.no_grad():
        ref = [y.float() for y in candidates[0][1](**inputs)]
        worst = 0.0
        for _, fn in candidates[1:]:
            for a, b in zip(ref, fn(**inputs)):
                worst = max(worst, ((a - b.float()).abs().max() / a.abs().max()).item())
    return worst


def machine_line(device: torch.device) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open('/proc/cpuinfo') as info:
            cpu = next(line.split(':', 1)[1].strip() for line in info
                       if line.startswith('model name'))
    except (OSError, StopIteration):
        pass
    line = (f'{platform.platform()} | {cpu} | {os.cpu_count()} cpus | torch {torch.__version__} '
            f'| {torch.get_num_threads()} threads')
    if device.type == 'cuda':
        line += f' | {torch.cuda.get_device_name(device)}'
    if hasattr(os, 'getloadavg'):
        line += f' | load average {os.getloadavg()[0]:.1f} (1 min) at start'
    return line


def _fmt(value: float, scale: float = 1.0, digits: int = 0) -> str:
    return 'n/a' if value != value else f'{value * scale:.{digits}f}'


def _ratio(reference: float, value: float) -> str:
    return 'n/a' if value != value else f'{reference / value:.2f}x'


def run(shapes, device: torch.device, dtype: torch.dtype, repeats: int,
        with_sequential: bool, with_mamba_ssm: bool,
        baseline: Optional[Callable] = None, memory: bool = True) -> None:
    print(f'# machine: {machine_line(device)}')
    memory_kind = ('torch.cuda.max_memory_allocated growth' if device.type == 'cuda'
                   else 'peak RSS growth' if memory else
                   "n/a (glibc's adaptive mmap threshold: freed buffers stay in the process)")
    print(f'# dtype {dtype}, chunk_size {CHUNK} (ours {OURS_CHUNK}), G = 1, D, dt_bias, '
          f'dt_softplus; both directions; '
          f'median of {repeats} interleaved rounds (1 for L > {LONG}); memory = {memory_kind}')
    print('# ms = wall clock; cpu ms = process CPU time (all threads), steadier on a shared '
          'machine')
    header = ('| B | L | method | fwd ms | fwd cpu ms | fwd MiB | fwd+bwd ms | fwd+bwd cpu ms '
              '| fwd+bwd MiB | speed-up fwd (wall / cpu) | speed-up fwd+bwd (wall / cpu) |')
    print(header)
    print('|---' * (header.count('|') - 1) + '|')
    for shape in shapes:
        batch, length = shape[:2]
        long = length > LONG
        inputs = make_inputs(shape, device, dtype)
        methods: List[Tuple[str, Callable]] = [('ours', ours_bidirectional)]
        products = None
        if device.type == 'cpu':
            products = products_of_ours(inputs)
            methods.append((PRODUCTS, products))
        if baseline is not None:
            methods.append(('baseline', baseline))
        if with_mamba_ssm:
            methods.append(('mamba_ssm x2 (flips)', mamba_ssm_bidirectional))
        methods.append(('minimal x2 (flips)', minimal_bidirectional))
        seq = with_sequential and length <= SEQUENTIAL_MAX_L
        fwd_methods = methods + ([('sequential', sequential_bidirectional)] if seq else [])
        both_methods = methods + ([('sequential', sequential_bidirectional)]
                                  if seq and _sequential_fits(shape) else [])
        n = 1 if long else repeats
        fwd = measure_interleaved(fwd_methods, inputs, device, False, n, warmup=not long,
                                  memory=memory)
        both = measure_interleaved(both_methods, inputs, device, True, n, warmup=not long,
                                   memory=memory)
        ref_f, ref_b = fwd['minimal x2 (flips)'], both['minimal x2 (flips)']
        nan3 = (float('nan'),) * 3
        for name, _ in fwd_methods:
            f, b = fwd[name], both.get(name, nan3)
            print(f'| {batch} | {length} | {name} | {_fmt(f[0], 1e3)} | {_fmt(f[1], 1e3)} '
                  f'| {_fmt(f[2])} | {_fmt(b[0], 1e3)} | {_fmt(b[1], 1e3)} | {_fmt(b[2])} '
                  f'| {_ratio(ref_f[0], f[0])} / {_ratio(ref_f[1], f[1])} '
                  f'| {_ratio(ref_b[0], b[0])} / {_ratio(ref_b[1], b[1])} |',
                  flush=True)
        agree = _max_relative_difference(_leaves(inputs, False),
                                         [m for m in fwd_methods if m[0] != PRODUCTS])
        print(f'|  |  | max relative difference of the forward outputs: {agree:.1e} '
              + '|  ' * 8 + '|', flush=True)
        if products is not None:
            gflop, count = products.gflop, products.count
            total = gflop['fwd'] + gflop['bwd']
            print(f'# B {batch} L {length}: ours runs {count["fwd"]} batched products '
                  f'({gflop["fwd"]:.2f} GFLOP) forward, {count["fwd"] + count["bwd"]} '
                  f'({total:.2f} GFLOP) forward + backward; alone they ran at '
                  f'{gflop["fwd"] / fwd[PRODUCTS][1]:.0f} and '
                  f'{total / both[PRODUCTS][1]:.0f} GFLOP/s (CPU time)', flush=True)


def inference(device: torch.device, dtype: torch.dtype, repeats: int,
              baseline: Optional[Callable] = None, memory: bool = True) -> None:
    """No-grad forward (how a detector's backbone runs at test time) of ours and the minimal
    listing, side by side."""
    print(f'# machine: {machine_line(device)}')
    print(f'# no-grad forward, dtype {dtype}, G = 1, D, dt_bias, dt_softplus, both directions; '
          f'median of {repeats} interleaved rounds after a warm-up')
    print('| B | L | H | method | ms | cpu ms | MiB | speed-up (wall / cpu) |')
    print('|---|---|---|---|---|---|---|---|')
    for shape in INFERENCE_SHAPES:
        inputs = make_inputs(shape, device, dtype)
        methods = [('ours', ours_bidirectional)]
        if device.type == 'cpu':
            methods.append((PRODUCTS, products_of_ours(inputs)))
        if baseline is not None:
            methods.append(('baseline', baseline))
        methods.append(('minimal x2 (flips)', minimal_bidirectional))
        results = measure_interleaved(methods, inputs, device, False, repeats, warmup=True,
                                      memory=memory)
        ref = results['minimal x2 (flips)']
        for name, _ in methods:
            wall, cpu, mib = results[name]
            print(f'| {shape[0]} | {shape[1]} | {shape[2]} | {name} | {wall * 1e3:.1f} '
                  f'| {cpu * 1e3:.1f} | {_fmt(mib)} '
                  f'| {_ratio(ref[0], wall)} / {_ratio(ref[1], cpu)} |', flush=True)
        agree = _max_relative_difference(_leaves(inputs, False),
                                         [m for m in methods if m[0] != PRODUCTS])
        print(f'|  |  |  | max relative difference of the outputs: {agree:.1e} |  |  |  |  |',
              flush=True)


def chunk_sweep(device: torch.device, repeats: int, memory: bool = True) -> None:
    """Fwd+bwd time of our CPU path for several chunk sizes (the reason for its default)."""
    print(f'# machine: {machine_line(device)}')
    print('| B | L | chunk size | fwd+bwd ms | fwd+bwd cpu ms | fwd+bwd MiB |')
    print('|---|---|---|---|---|---|')
    for shape in QUICK_SHAPES:
        inputs = make_inputs(shape, device, torch.float32)
        for chunk in (256, 128, 64, 48, 32):
            def ours(x, dt, A, B, C, D, dt_bias, chunk=chunk):
                return ssd_scan_bidirectional(x, dt, A, B, C, chunk_size=chunk, D=D,
                                              dt_bias=dt_bias, dt_softplus=True)

            wall, cpu, mib = measure_interleaved([(str(chunk), ours)], inputs, device, True,
                                                 repeats, warmup=True, memory=memory)[str(chunk)]
            print(f'| {shape[0]} | {shape[1]} | {chunk} | {wall * 1e3:.0f} | {cpu * 1e3:.0f} '
                  f'| {_fmt(mib)} |', flush=True)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quick', action='store_true', help='B 8 L 197 and B 2 L 4096 only')
    parser.add_argument('--device', default='cpu', help='cpu or cuda')
    parser.add_argument('--repeats', type=int, default=3,
                        help='interleaved timing rounds per shape (1 at long L; default 3)')
    parser.add_argument('--no-sequential', action='store_true',
                        help='skip the token-by-token scan (slow at long L)')
    parser.add_argument('--chunk-sweep', action='store_true',
                        help='only time our CPU path for several chunk sizes')
    parser.add_argument('--inference', action='store_true',
                        help='only the no-grad forward of the DinoVim-T mixer call')
    parser.add_argument('--threads', type=int, default=None,
                        help='torch intra-op threads (1 is steadier on a shared machine)')
    parser.add_argument('--baseline', metavar='FILE',
                        help='also time ssd_scan_bidirectional of this module file')
    parser.add_argument('--malloc', choices=('pinned', 'adaptive'), default='pinned',
                        help="CPU: 'pinned' (default) pins glibc's mmap threshold so that the "
                             "peak memory columns are measured, and every large buffer costs "
                             "fresh zeroed pages; 'adaptive' keeps glibc's default, as a "
                             "training process runs (times without most page faults, memory "
                             "n/a)")
    args = parser.parse_args(argv)
    baseline = load_baseline(args.baseline) if args.baseline else None
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    memory = device.type == 'cuda' or args.malloc == 'pinned'
    if args.malloc == 'pinned':
        _pin_malloc()
    if args.chunk_sweep:
        chunk_sweep(device, args.repeats, memory)
        return
    if args.inference:
        inference(device, torch.bfloat16 if device.type == 'cuda' else torch.float32,
                  args.repeats, baseline, memory)
        return
    shapes = QUICK_SHAPES if args.quick else FULL_SHAPES
    if device.type == 'cuda':
        if not torch.cuda.is_available():
            raise SystemExit('--device cuda given but torch.cuda.is_available() is False')
        try:
            import mamba_ssm  # noqa: F401
            with_mamba = True
        except ImportError:
            print('# mamba_ssm is not importable: no mamba_chunk_scan_combined column')
            with_mamba = False
        run(shapes, device, torch.bfloat16, args.repeats, not args.no_sequential, with_mamba,
            baseline, memory)
    else:
        if not torch.cuda.is_available():
            print('# no CUDA device: the Triton / mamba_ssm comparison is skipped; CPU part only')
        run(shapes, device, torch.float32, args.repeats, not args.no_sequential, False,
            baseline, memory)


if __name__ == '__main__':
    main()
