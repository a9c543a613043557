"""Every GPU autotune config of the Triton SSD kernels compiled for A100 (sm_80) and H100 / H200
(sm_90) on a machine without a GPU, with the launch signatures of real calls.

The launches are recorded from DinoVim mixers (``BidirectionalMamba2Mixer`` at the DinoVim-T and
DinoVim-B widths, 197 tokens, forward and backward) and from one single-direction call with every
option (initial and final states, dt_limit, D per channel), on CPU tensors: the autotuner's launch
is replaced by a recorder, so the host code runs as on a GPU (strides, dtypes, which scalars are 1
or multiples of 16, pointer alignment) and no kernel runs. fp16 is recorded under fp16 autocast,
as a mixed-precision model calls the op; bf16 is the fp16 recording with the element type
swapped (the host code does not depend on which 16-bit type it gets). Each recorded launch is then
specialised and compiled by Triton's own binder and compiler for each target and config, and
ptxas's report gives registers and spills, the compiled kernel its shared memory.

Asserted, per kernel, target and dtype: every config compiles, its shared memory fits the target,
and at least 2 configs spill nothing. The full sweep (about 650 compilations, an hour on 2
cores) is marked slow; the default run compiles the backward chunk kernel (dB, dC, ddA: the one
at the register limit) in fp32 for both targets. Run as a script, this file prints the table of
docs/benchmarks.md ("GPU kernels: resources per target"):
``python tests/test_ops/test_ssd_triton_resources.py``.
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
TIGHTEST_KERNEL = '_chunk_scan_chunk_state_bwd_dbc_kernel'
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


def sweep(dtype: str, archs=(80, 90), kernel_names=None) -> List[dict]:
    """One row per (kernel, target, distinct launch signature, config): registers, spilled
    bytes (stores + loads), shared memory."""
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    rows, seen = [], set()
    launches = _record_launches(dtype)
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


def table(rows: List[dict]) -> str:
    """Markdown: per kernel, target and dtype, the configs without spills, those spilling and the
    largest shared memory (KB), over every recorded launch signature."""
    lines = ['| kernel | target | dtype | compiled | spill-free | spilling | registers | '
             'max shared (KB) |', '|---|---|---|---:|---:|---:|---|---:|']
    for (kernel, arch, dtype), group in _groups(rows).items():
        ok = sum(r['spill'] == 0 for r in group)
        regs = sorted({r['regs'] for r in group})
        regs = str(regs[0]) if len(regs) == 1 else f'{regs[0]}-{regs[-1]}'
        lines.append(f"| {kernel.strip('_')} | sm_{arch} | {dtype} | {len(group)} | {ok} | "
                     f"{len(group) - ok} | {regs} | "
                     f"{max(r['shared'] for r in group) / 1024:.0f} |")
    return '\n'.join(lines)


def _sweep_in_subprocess(dtype: str, archs, kernel_names=()) -> List[dict]:
    """The kernels must be compiled, not interpreted: a fresh interpreter without
    TRITON_INTERPRET (another test module may have set it for this process)."""
    env = {k: v for k, v in os.environ.items() if k != 'TRITON_INTERPRET'}
    cmd = [sys.executable, __file__, '--json', dtype, ','.join(map(str, archs)),
           ','.join(kernel_names)]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3000)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_backward_chunk_kernel_fits_sm80_and_sm90_in_fp32():
    """The kernel closest to the register limit, in the dtype whose products take the most
    registers (about 30 compilations)."""
    rows = _sweep_in_subprocess('fp32', (80, 90), (TIGHTEST_KERNEL, ))
    assert {r['kernel'] for r in rows} == {TIGHTEST_KERNEL}
    assert check(rows) == [], table(rows)


@pytest.mark.slow  # about 170 compilations per dtype
@pytest.mark.parametrize('dtype', DTYPES)
def test_every_kernel_and_config_fits_sm80_and_sm90(dtype):
    rows = _sweep_in_subprocess(dtype, (80, 90))
    assert len({r['kernel'] for r in rows}) == 9
    assert check(rows) == [], table(rows)


if __name__ == '__main__':
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__)))))
    if sys.argv[1:2] == ['--json']:
        dtype, archs, names = sys.argv[2:5]
        print(json.dumps(sweep(dtype, tuple(map(int, archs.split(','))),
                               tuple(filter(None, names.split(','))))))
    else:
        all_rows = [row for d in DTYPES for row in sweep(d)]
        print(table(sorted(all_rows, key=lambda r: (r['kernel'], r['arch'],
                                                      DTYPES.index(r['dtype'])))))
        print('\n'.join(check(all_rows)) or 'all checks pass')
