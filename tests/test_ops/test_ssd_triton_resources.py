"""Every GPU autotune config of the Triton SSD kernels compiled for A100 (sm_80) and H100 / H200
(sm_90) on a machine without a GPU, with the launch signatures of real calls; and the bytes of
chunk state the kernels write per token and head.

The launches are recorded at chunk_size 64, 128 and 256 (the kernels' chunks) from DinoVim
mixers (``BidirectionalMamba2Mixer`` at the DinoVim-T and DinoVim-B widths, 197 tokens, forward
and backward) and from one single-direction call with every option (initial and final states,
dt_limit, D per channel), on CPU tensors: the autotuner's launch is replaced by a recorder, so
the host code runs as on a GPU (strides, dtypes, which scalars are 1 or multiples of 16, pointer
alignment) and no kernel runs. fp16 is recorded under fp16 autocast, as a mixed-precision model
calls the op; bf16 is the fp16 recording with the element type swapped (the host code does not
depend on which 16-bit type it gets). Each recorded launch is then specialised and compiled by
Triton's own binder and compiler for each target and config, and ptxas's report gives registers
and spills, the compiled kernel its shared memory.

Asserted, per kernel, target and dtype: every config compiles, its shared memory fits the target,
and at least 2 configs of every launch spill nothing. The full sweep (about 2,700 compilations,
hours on 2 cores) is marked slow; the default run compiles the kernel closest to the register
limit in fp32 for both targets, with the launches recorded at chunk_size 256 (the tiles, not the
chunk, set the registers). Run as a script, this file prints the tables of docs/benchmarks.md
("GPU kernels: resources per target"): ``python tests/test_ops/test_ssd_triton_resources.py``
(the compilations) and ``... --state-bytes`` (the chunk states written).
"""
import collections
import contextlib
import io
import json
import os
import re
import subprocess
import sys
from typing import Dict, List

import pytest
import torch

pytest.importorskip('triton')

#: Largest shared memory one block may use (bytes, opt-in): A100 163 KB, H100 / H200 227 KB.
SHARED_LIMIT = {80: 166912, 90: 232448}
MIN_SPILL_FREE = 2
DTYPES = ('fp32', 'bf16', 'fp16')
TIGHTEST_KERNEL = '_chunk_scan_bwd_ddA_kernel'
#: The op's chunk_size in the recorded calls: the kernels' chunk of the state recurrence.
CHUNK_SIZES = (64, 128, 256)


def _record_launches(dtype: str, chunk_sizes=CHUNK_SIZES) -> list:
    """(autotuner, args, kwargs) of every kernel launch of the DinoVim mixers' forward and
    backward passes and of an all-options scan at each of ``chunk_sizes``, on CPU tensors,
    without running a kernel."""
    from triton.runtime.autotuner import Autotuner

    from dinomamba_mm.models.layers.bidirectional_mamba2 import BidirectionalMamba2Mixer
    from dinomamba_mm.ops.ssd import ssd_scan
    from dinomamba_mm.ops.ssd import triton_kernels as kernels

    launches = []

    def record(self, *args, grid, warmup=False, **kwargs):
        launches.append((self, args, kwargs))
        if callable(grid):  # the host code may read what the grid function sets
            grid(dict(kwargs, **self.configs[0].all_kwargs()))

    torch_dtype = dict(fp32=torch.float32, bf16=torch.float16, fp16=torch.float16)[dtype]
    autocast = torch.autocast('cpu', dtype=torch_dtype, enabled=dtype != 'fp32')
    torch.manual_seed(0)
    # INTERPRETING lets the op take CPU tensors; the recorder runs no kernel
    with _patched(Autotuner, 'run', record), _patched(kernels, 'INTERPRETING', True):
        for chunk_size in chunk_sizes:
            for width in (256, 768):  # DinoVim-T and -B: H 8 and 24, P 64, N 64
                mixer = BidirectionalMamba2Mixer(width, d_state=64, headdim=64,
                                                 chunk_size=chunk_size, ssd_impl='triton')
                with autocast:
                    y = mixer(torch.randn(2, 197, width))
                y.float().sum().backward()
            x = torch.randn(2, 197, 8, 64, dtype=torch_dtype, requires_grad=True)
            y, final = ssd_scan(
                x, torch.randn(2, 197, 8, dtype=torch_dtype), -torch.rand(8),
                torch.randn(2, 197, 1, 64, dtype=torch_dtype),
                torch.randn(2, 197, 1, 64, dtype=torch_dtype), chunk_size=chunk_size,
                D=torch.randn(8, 64), z=torch.randn(2, 197, 8, 64, dtype=torch_dtype),
                dt_bias=torch.randn(8), dt_softplus=True, dt_limit=(0.001, 0.1),
                initial_states=torch.randn(2, 8, 64, 64), return_final_states=True,
                reverse=True, impl='triton')
            (y.float().sum() + final.sum()).backward()
    assert launches and all(isinstance(k, Autotuner) for k, _, _ in launches)
    return launches


@contextlib.contextmanager
def _patched(owner, name, value):
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def _ptxas_report(log: str) -> Dict[str, int]:
    regs = re.search(r'Used (\d+) registers', log)
    spills = re.search(r'(\d+) bytes spill stores, (\d+) bytes spill loads', log)
    assert regs and spills, log
    return dict(regs=int(regs.group(1)), spill=int(spills.group(1)) + int(spills.group(2)))


def sweep(dtype: str, archs=(80, 90), kernel_names=None,
          chunk_sizes=CHUNK_SIZES) -> List[dict]:
    """One row per (kernel, target, distinct launch signature, config): registers, spilled
    bytes (stores + loads), shared memory."""
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    rows, seen = [], set()
    launches = _record_launches(dtype, chunk_sizes)
    knobs.nvidia.dump_ptxas_log = True
    knobs.compilation.always_compile = True  # a cache hit would skip ptxas and its report
    for arch in archs:
        target = GPUTarget('cuda', arch, 32)
        backend = make_backend(target)
        for autotuner, args, kwargs in launches:
            fn = autotuner.fn
            if kernel_names and fn.__name__ not in kernel_names:
                continue
            binder = create_function_from_signature(fn.signature, fn.params, backend)
            cfg_args = {fn.arg_names.index(k) for k in autotuner.configs[0].kwargs}
            for cfg in autotuner.configs:
                call = dict(kwargs, **cfg.all_kwargs())
                bound, spec, _ = binder(*args, **call)
                options, signature, constexprs, attrs = fn._pack_args(backend, call, bound, spec,
                                                                      None)
                if dtype == 'bf16':
                    signature = {k: v.replace('fp16', 'bf16') for k, v in signature.items()}
                launch = (arch, fn.__name__, repr(signature), repr(attrs),
                          repr({k: v for k, v in constexprs.items() if k[0] not in cfg_args}))
                if (launch, str(cfg)) in seen:
                    continue
                seen.add((launch, str(cfg)))
                log = io.StringIO()
                with contextlib.redirect_stdout(log):
                    compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs),
                                              target=target, options=options.__dict__)
                rows.append(dict(kernel=fn.__name__, arch=arch, dtype=dtype, config=str(cfg),
                                 launch=hash(launch), chunk=call.get('Q'),
                                 shared=compiled.metadata.shared,
                                 **_ptxas_report(log.getvalue())))
    return rows


def check(rows: List[dict]) -> List[str]:
    """What the rows violate: shared memory over the target's limit, or fewer than
    MIN_SPILL_FREE spill-free configs for some launch of a kernel, target and dtype."""
    problems = [f"{r['kernel']} sm_{r['arch']} {r['dtype']} {r['config']}: shared memory "
                f"{r['shared']} > {SHARED_LIMIT[r['arch']]}"
                for r in rows if r['shared'] > SHARED_LIMIT[r['arch']]]
    launches = collections.defaultdict(list)
    for r in rows:
        launches[(r['kernel'], r['arch'], r['dtype'], r['launch'])].append(r['spill'] == 0)
    for (kernel, arch, dtype, _), spill_free in launches.items():
        if sum(spill_free) < MIN_SPILL_FREE:
            problems.append(f'{kernel} sm_{arch} {dtype}: {sum(spill_free)} of '
                            f'{len(spill_free)} configs without spills')
    return problems


def _groups(rows: List[dict]) -> Dict[tuple, List[dict]]:
    groups = collections.defaultdict(list)
    for r in rows:
        groups[(r['kernel'], r['arch'], r['dtype'])].append(r)
    return groups


def likely_pick(configs: List[dict]) -> dict:
    """The config of one launch the autotuner would likely keep (it times them all): a
    spill-free one with the largest BLOCK_P / BLOCK / BLOCK_H, then the most stages, then the
    most warps; the least spilling one if none is spill-free. A guess, not a measurement."""
    def size(r):
        numbers = [int(v) for v in re.findall(r'(?:BLOCK\w*|num_stages|num_warps): (\d+)',
                                              r['config'])]
        return (r['spill'] == 0, -r['spill'], *numbers)
    return max(configs, key=size)


def table(rows: List[dict]) -> str:
    """Markdown: per kernel, target and dtype, the configs without spills, those spilling and the
    largest shared memory (KB), over every recorded launch signature; and the registers, spilled
    bytes and shared memory of the likely pick of every launch (the largest over the
    launches)."""
    lines = ['| kernel | target | dtype | compiled | spill-free | spilling | registers | '
             'max shared (KB) | likely pick: registers / spill (B) / shared (KB) |',
             '|---|---|---|---:|---:|---:|---|---:|---|']
    for (kernel, arch, dtype), group in _groups(rows).items():
        ok = sum(r['spill'] == 0 for r in group)
        regs = sorted({r['regs'] for r in group})
        regs = str(regs[0]) if len(regs) == 1 else f'{regs[0]}-{regs[-1]}'
        launches = collections.defaultdict(list)
        for r in group:
            launches[r['launch']].append(r)
        picks = [likely_pick(configs) for configs in launches.values()]
        lines.append(f"| {kernel.strip('_')} | sm_{arch} | {dtype} | {len(group)} | {ok} | "
                     f"{len(group) - ok} | {regs} | "
                     f"{max(r['shared'] for r in group) / 1024:.0f} | "
                     f"{max(r['regs'] for r in picks)} / {max(r['spill'] for r in picks)} / "
                     f"{max(r['shared'] for r in picks) / 1024:.0f} |")
    return '\n'.join(lines)


def _sweep_in_subprocess(dtype: str, archs, kernel_names=(),
                         chunk_sizes=CHUNK_SIZES) -> List[dict]:
    """The kernels must be compiled, not interpreted: a fresh interpreter without
    TRITON_INTERPRET (another test module may have set it for this process)."""
    env = {k: v for k, v in os.environ.items() if k != 'TRITON_INTERPRET'}
    cmd = [sys.executable, __file__, '--json', dtype, ','.join(map(str, archs)),
           ','.join(kernel_names), ','.join(map(str, chunk_sizes))]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=20000)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_tightest_kernel_fits_sm80_and_sm90_in_fp32():
    """The kernel closest to the register limit, in the dtype whose products take the most
    registers (32 compilations)."""
    rows = _sweep_in_subprocess('fp32', (80, 90), (TIGHTEST_KERNEL, ), (256, ))
    assert {r['kernel'] for r in rows} == {TIGHTEST_KERNEL}
    assert check(rows) == [], table(rows)


@pytest.mark.slow  # about 900 compilations per dtype
@pytest.mark.parametrize('dtype', DTYPES)
def test_every_kernel_and_config_fits_sm80_and_sm90(dtype):
    rows = _sweep_in_subprocess(dtype, (80, 90))
    assert len({r['kernel'] for r in rows}) == 12
    assert {r['chunk'] for r in rows} == {None, *CHUNK_SIZES}
    assert check(rows) == [], table(rows)


#: The kernels that write chunk states (K B H, nchunks, P, N) float32, and the argument they
#: write: chunk_state_fwd writes S_c, state_passing_fwd H_c over it; chunk_scan_bwd_dstates
#: writes the local part of dL/dH_c, state_passing_bwd dL/dS_c over it.
STATE_WRITERS = {'_chunk_state_fwd_kernel': 'states_ptr',
                 '_state_passing_fwd_kernel': 'states_ptr',
                 '_chunk_scan_bwd_dstates_kernel': 'dstates_ptr',
                 '_state_passing_bwd_kernel': 'dstates_ptr'}


def state_bytes_per_token_and_head(chunk_size: int, length: int, headdim: int = 64,
                                   dstate: int = 64) -> Dict[str, float]:
    """Bytes of chunk state the kernels write per token and head in the forward pass and in
    the backward pass (which recomputes the forward states) of one fp32 scan (B 2, H 8), counted
    from the buffers its recorded launches write (the per-sequence initial / final states and
    their gradients are not chunk states and not counted)."""
    from triton.runtime.autotuner import Autotuner

    from dinomamba_mm.ops.ssd import ssd_scan
    from dinomamba_mm.ops.ssd import triton_kernels as kernels

    written = []

    def record(self, *args, grid, warmup=False, **kwargs):
        name = self.fn.__name__
        if name in STATE_WRITERS:
            written.append(args[self.fn.arg_names.index(STATE_WRITERS[name])].nbytes)
        if callable(grid):
            grid(dict(kwargs, **self.configs[0].all_kwargs()))

    batch, heads = 2, 8
    x = torch.randn(batch, length, heads, headdim, requires_grad=True)
    with _patched(Autotuner, 'run', record), _patched(kernels, 'INTERPRETING', True):
        y = ssd_scan(x, torch.rand(batch, length, heads), -torch.rand(heads),
                     torch.randn(batch, length, 1, dstate), torch.randn(batch, length, 1, dstate),
                     chunk_size=chunk_size, impl='triton')
        forward = sum(written)
        y.sum().backward()
    per = batch * length * heads
    return dict(forward=forward / per, backward=(sum(written) - forward) / per)


@pytest.mark.parametrize('chunk_size', CHUNK_SIZES)
def test_state_bytes_per_token_and_head(chunk_size):
    """The chunk of the state recurrence is chunk_size: each chunk writes a P x N float32 state
    per head twice in the forward pass (S_c, then H_c in its place) and four times in the
    backward pass (those two again, dL/dH_c's local part and dL/dS_c in its place), so
    2 P N 4 / Q and 4 P N 4 / Q bytes per token and head (512 tokens: whole chunks)."""
    got = state_bytes_per_token_and_head(chunk_size, 512)
    state = 64 * 64 * 4
    assert got == dict(forward=2 * state / chunk_size, backward=4 * state / chunk_size)


def test_cb_is_computed_once_per_group():
    """CB = C B^T and its gradient dCB are computed once per group and chunk, not per head: in
    recorded launches of a forward and backward pass (K 2, B 2, H 8 in G 2, L 197, chunk_size
    64), the CB kernel runs twice (forward, and the backward's recomputation) and the dCB kernel
    once, each over K B G = 8 programs per chunk tile (per head: 32), and every kernel that
    reads CB or dCB gets one (K B G, nchunks, Q, Q) float32 buffer."""
    from triton.runtime.autotuner import Autotuner

    from dinomamba_mm.ops.ssd import ssd_scan_directions
    from dinomamba_mm.ops.ssd import triton_kernels as kernels

    K, batch, length, heads, groups, chunk = 2, 2, 197, 8, 2, 64
    launches = []

    def record(self, *args, grid, warmup=False, **kwargs):
        grid = grid(dict(kwargs, **self.configs[0].all_kwargs())) if callable(grid) else grid
        named = dict(zip(self.fn.arg_names, args))
        launches.append((self.fn.__name__, grid,
                         {n: tuple(named[n].shape) for n in ('CB_ptr', 'dCB_ptr') if n in named}))

    x = torch.randn(K, batch, length, heads, 16, requires_grad=True)
    with _patched(Autotuner, 'run', record), _patched(kernels, 'INTERPRETING', True):
        y = ssd_scan_directions(x, torch.rand(K, batch, length, heads), -torch.rand(K, heads),
                                torch.randn(K, batch, length, groups, 16),
                                torch.randn(K, batch, length, groups, 16), reverse=(False, True),
                                chunk_size=chunk, impl='triton')
        y.sum().backward()
    per_group = K * batch * groups
    buffer = (per_group, -(-length // chunk), chunk, chunk)
    grids = {name: [g for n, g, _ in launches if n == name]
             for name in ('_chunk_cb_kernel', '_chunk_scan_bwd_dcb_kernel')}
    assert [g[0] for g in grids['_chunk_cb_kernel']] == [per_group, per_group]
    assert [g[0] for g in grids['_chunk_scan_bwd_dcb_kernel']] == [per_group]
    read = [(name, shape) for name, _, shapes in launches for shape in shapes.values()]
    assert len(read) == 7 and all(shape == buffer for _, shape in read), read


if __name__ == '__main__':
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__)))))
    if sys.argv[1:2] == ['--json']:
        dtype, archs, names, chunks = sys.argv[2:6]
        print(json.dumps(sweep(dtype, tuple(map(int, archs.split(','))),
                               tuple(filter(None, names.split(','))),
                               tuple(map(int, chunks.split(','))))))
    elif sys.argv[1:2] == ['--state-bytes']:
        print('| chunk_size | L | forward (B / token / head) | backward |\n|---:|---:|---:|---:|')
        for chunk in (32, *CHUNK_SIZES):
            for length in (197, 512, 1025):
                got = state_bytes_per_token_and_head(chunk, length)
                print(f"| {chunk} | {length} | {got['forward']:.0f} | {got['backward']:.0f} |")
    else:
        all_rows = [row for d in DTYPES for row in sweep(d)]
        print(table(sorted(all_rows, key=lambda r: (r['kernel'], r['arch'],
                                                      DTYPES.index(r['dtype'])))))
        print('\n'.join(check(all_rows)) or 'all checks pass')
