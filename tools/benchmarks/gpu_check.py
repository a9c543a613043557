"""The GPU check: the SSD kernels, their speed, the backbones and a few training steps on one GPU,
each part within a time budget, printing as it goes.

    python tools/benchmarks/gpu_check.py                      # every part, on CUDA
    python tools/benchmarks/gpu_check.py --parts a --budget a=300 --out DIR
    python tools/benchmarks/gpu_check.py --device cpu --tiny  # the rehearsal, about 80 s

Parts, in this order. Each runs in a child process stopped at its budget (seconds, plus what the
parts before it left unused; ``--budget PART=SECONDS`` changes one), and its output goes to
stdout as it comes and to ``OUT/<part>.log``; ``OUT/setup.log`` holds the machine and the
versions, ``OUT/summary.md`` each part's outcome and time.

- a, kernels (180 s): ``pytest -m gpu tests/test_ops/test_ssd_gpu.py``: our Triton kernels against
  the PyTorch path (fp32, bf16, single and bidirectional, L 1 to 16384, every output and gradient
  finite), both paths against the float64 oracle and under strong decay, and against mamba_ssm's
  ``mamba_chunk_scan_combined`` (L 197, 1025, 4096). A failure's message is printed when it
  happens.
- b, scan speed (90 s): ``tools/benchmarks/ssd.py``'s table: ours (both directions in one call,
  chunk_size 64, 128 and 256; ``DINOMAMBA_SSD_IMPL=triton``) against mamba_ssm's
  ``mamba_chunk_scan_combined`` twice (the backward direction on flipped copies), bf16, a
  DinoVim-B mixer's heads (H 24, P = N = 64), B 8 and 64, L 197, 1025 and 4096, forward and
  forward + backward, median of 10 rounds after a warm-up one.
- c, backbones (150 s): ``tools/benchmarks/backbones.py``: DinoVim-T / -S / -B against mmpretrain's
  ViT at the DeiT sizes (SDPA attention) at 224, 512, 1024 and 1248 px, bf16 autocast, batch 8
  (halved while out of memory), forward and forward + backward, time and peak memory; DinoVim
  on our kernels (``DINOMAMBA_SSD_IMPL=triton``), as in part d.
- d, training steps (60 s): ``pytest -m gpu -k full tests/test_runner/test_training_steps.py``:
  4 DINO iterations of the DinoVim-S config and 4 UperNet ones, bf16 AMP: finite losses and the
  teacher's exact EMA step.

On CUDA the parts share Triton's autotuning results through its disk cache
(``TRITON_CACHE_AUTOTUNING=1`` unless set): part a compiles and tunes the kernels, and the later
parts' processes reuse both.

Each check has one home, those tests and benchmark scripts: this script picks their sizes, runs
them under budgets and gathers what they print. mamba_ssm is used from its Python files alone
(its package ``__init__`` imports its CUDA extension): ``tests/test_ops/mamba_ssm_shims.py``
enters the package without it, as the tests do.

``--device cpu --tiny`` runs every part on CPU at small sizes, one thread each, the rehearsal
before a GPU does (tests/test_tools/test_gpu_check.py runs it): (a) the same tests under Triton's
interpreter (test_ssd_gpu.py with ``DINOMAMBA_SSD_TEST_DEVICE=cpu``: H 2, P = N = 16, L 1 and
65), (b) B 1, L 65, H 2, P = N = 16, fp32, forward only (part a runs both backwards), our
kernels and mamba_ssm's interpreted, (c) DinoVim-T and DeiT-T at 32 px, batch 1, forward +
backward, on the PyTorch path, (d) the tests' tiny iterations (48 / 64 px, float32).

The project's GPU test machine (one H200, 16 cores, Python 3.12, its own torch 2.11 and triton
3.6, no OpenMMLab packages, nothing reachable; 15 minutes of device time per session, 10 per
command) runs it from wheels carried in ``.whl`` (45 MB; with the repository's 7 MB, 49 MiB of
the 64 MiB that may travel). Once, here, in the repository root: the mmcv wheel built for
Python 3.12 and torch 2.11.0 (CPU ops, which mmseg imports), mamba-ssm's Python files as a wheel
(built by a Python that has torch, e.g. ``.venv/bin/python``), and the rest (mmdet and its
compiled needs too: ``dinomamba_mm.datasets``, which tools/train.py imports, imports mmdet;
setuptools < 81 for the ``pkg_resources`` of mmengine's ``pkg::`` config bases)::

    echo /.whl/ >> "$(git rev-parse --git-common-dir)/info/exclude"
    mkdir -p .whl && cp ../shared/wheels/mmcv-2.1.0-cp312-cp312-linux_x86_64.whl .whl/
    MAMBA_FORCE_BUILD=TRUE MAMBA_SKIP_CUDA_BUILD=TRUE .venv/bin/python -m pip wheel -q \
        --no-deps --no-build-isolation -w .whl mamba-ssm==2.3.2.post1
    .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl mmengine==0.10.7 mmpretrain==1.2.0 \
        mmsegmentation==1.2.2 mmdet==3.3.0 addict==2.4.0 termcolor==3.3.0 yapf==0.43.0 \
        platformdirs==4.14.9 mat4py==0.6.0 model-index==0.1.11 ordered-set==4.1.0 \
        prettytable==3.19.0 wcwidth==0.9.4 ftfy==6.3.1 importlib-metadata==10.2.0 \
        lazy-importer==0.1.0 setuptools==80.10.2 pycocotools==2.0.11 shapely==2.2.0 \
        terminaltables==3.1.10

Then one call of the device tool's ``run`` with ``carry: [".whl"]``, ``timeout_s: 560`` (the
parts' budgets add up to 480 s, the install takes seconds; that leaves about 5 of the 15 minutes
for a rerun of one part while the machine is warm, e.g. ``--parts a --budget a=240``) and this
command (one line, its three lines joined by spaces)::

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    || exit; python3 tools/benchmarks/gpu_check.py --out $OUT

Rehearsed here with ``python3`` a Python 3.12.1 venv holding torch 2.11.0+cu130, triton 3.6.0 and
the device's other packages (numpy 2.3.5: triton 3.6's interpreter fails on numpy >= 2.4, which
the compiled kernels do not use) and the same install from a cold cache (4 s): the command with
``--device cpu --tiny`` passes every part there, and parts c and d also with the device's numpy
2.5.2.
"""
import argparse
import importlib
import importlib.metadata
import importlib.util
import os
import os.path as osp
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, TextIO, Tuple

HERE = osp.dirname(osp.abspath(__file__))
ROOT = osp.dirname(osp.dirname(HERE))
PARTS = {'a': 'kernels', 'b': 'scan speed', 'c': 'backbones', 'd': 'training steps'}
BUDGETS = {'a': 180, 'b': 90, 'c': 150, 'd': 60}  # seconds on the GPU
TINY_BUDGET = 300  # seconds per part of the CPU rehearsal (about 15 on an idle core)
PACKAGES = ('torch', 'triton', 'numpy', 'mmengine', 'mmcv', 'mmpretrain', 'mmsegmentation',
            'mmdet', 'mamba_ssm')
SPEED_SHAPES = [(batch, length, 24, 64, 64) for batch in (8, 64) for length in (197, 1025, 4096)]
TINY_SPEED_SHAPES = [(1, 65, 2, 16, 16)]  # B, L, H, P, N
CHUNK_SIZES = (64, 128, 256)
BACKBONE_MODELS = ('DinoVim-T', 'DeiT-T', 'DinoVim-S', 'DeiT-S', 'DinoVim-B', 'DeiT-B')
PYTEST = ['-m', 'pytest', '-p', 'no:cacheprovider', '-v', '--tb=short', '-p', 'gpu_check']


def part_command(part: str, device: str, tiny: bool) -> Tuple[List[str], Dict[str, str]]:
    """The child's argv (after the Python executable) and its extra environment."""
    ours = {} if tiny else dict(DINOMAMBA_SSD_IMPL='triton')  # on CPU: the PyTorch path
    if part == 'a':
        env = dict(DINOMAMBA_SSD_TEST_DEVICE='cpu', TRITON_INTERPRET='1') if tiny else {}
        return PYTEST + ['-m', 'gpu', 'tests/test_ops/test_ssd_gpu.py'], env
    if part == 'b':
        env = dict(DINOMAMBA_SSD_IMPL='triton', **(dict(TRITON_INTERPRET='1') if tiny else {}))
        return [__file__, '--scan-speed', '--device', device] + ['--tiny'] * tiny, env
    if part == 'c':
        sizes, batch, models = ((32, ), 1, BACKBONE_MODELS[:2]) if tiny else (
            (224, 512, 1024, 1248), 8, BACKBONE_MODELS)
        return [osp.join(HERE, 'backbones.py'), '--device', device, '--amp', '--batch',
                str(batch), '--sizes', *map(str, sizes), '--models', *models, '--no-profile',
                '--repeats', '1' if tiny else '3', '--point-seconds', '2'] + (
                    ['--modes', 'fwd+bwd'] if tiny else []), ours
    if part == 'd':
        marks = ['-m', 'not slow', '-k', 'tiny'] if tiny else ['-m', 'gpu', '-k', 'full']
        return PYTEST + marks + ['tests/test_runner/test_training_steps.py'], ours
    raise ValueError(f'part must be one of {sorted(PARTS)}, got {part!r}')


def pytest_runtest_logreport(report) -> None:
    """(This module as a pytest plugin, ``-p gpu_check``.) A failure's message printed when it
    happens, so that a part stopped at its budget keeps it."""
    if report.failed:
        print(f'\n{report.nodeid} FAILED ({report.when}):\n{report.longreprtext[-4000:]}\n',
              flush=True)


class Tee:
    """Lines to stdout (flushed) and to a log file."""

    def __init__(self, path: str):
        self.file: TextIO = open(path, 'w')

    def line(self, text: str) -> None:
        for stream in (sys.stdout, self.file):
            stream.write(text + '\n')
            stream.flush()

    def close(self) -> None:
        self.file.close()


def run_part(argv: Sequence[str], env: Dict[str, str], budget: float, tee: Tee) -> Tuple[str, int]:
    """Run ``python argv`` from the repository root, its output line by line to ``tee``, its
    process group stopped when ``budget`` seconds have passed. Returns ('ok' | 'failed' |
    'stopped', exit code)."""
    child_env = dict(os.environ, PYTHONUNBUFFERED='1', **env)
    child_env['PYTHONPATH'] = os.pathsep.join(
        [ROOT, HERE] + [p for p in [os.environ.get('PYTHONPATH')] if p])
    # its own process group, in this session: stopping the command stops it too
    proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=child_env, text=True,
                            errors='replace', stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            bufsize=1, process_group=0)
    pump = threading.Thread(target=lambda: [tee.line(line.rstrip('\n')) for line in proc.stdout],
                            daemon=True)
    pump.start()
    try:
        code = proc.wait(timeout=budget)
        stopped = False
    except subprocess.TimeoutExpired:
        stopped = True
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
    pump.join(timeout=10)
    return ('stopped' if stopped else 'ok' if code == 0 else 'failed'), code


def versions() -> List[str]:
    found = []
    for name in PACKAGES:
        try:
            found.append(f'{name} {importlib.metadata.version(name)}')
        except importlib.metadata.PackageNotFoundError:
            found.append(f'{name} (not installed)')
    return found


def describe_setup(device: str, tee: Tee) -> bool:
    """The machine, the versions and the import checks every part relies on; False if one of
    those imports fails."""
    import torch
    sys.path.insert(0, osp.join(ROOT, 'tests', 'test_ops'))
    from benchmark_utils import machine_line
    tee.line(f'machine: {machine_line(device)}')
    if shutil.which('nvidia-smi'):
        query = subprocess.run(['nvidia-smi', '--query-gpu=name,driver_version,memory.total',
                                '--format=csv,noheader'], capture_output=True, text=True)
        tee.line(f'nvidia-smi: {query.stdout.strip() or query.stderr.strip()}')
    tee.line('versions: ' + ', '.join(versions()))
    ok = True
    for label, check in (('dinomamba_mm.ops.ssd', lambda: importlib.import_module(
            'dinomamba_mm.ops.ssd')), ('mmcv.ops', lambda: importlib.import_module('mmcv.ops')),
                         ('mamba_ssm Triton ops', mamba_ssm_module)):
        try:
            check()
            tee.line(f'import {label}: ok')
        except Exception as error:  # report every failing import, then stop
            tee.line(f'import {label}: FAILED, {type(error).__name__}: {error}')
            ok = False
    if ok:
        from dinomamba_mm.ops.ssd.api import select_backend
        probe = torch.empty(1, 1, 1, 1, device=device)
        tee.line(f"SSD backend for {device} tensors with impl='auto': "
                 f'{select_backend(None, probe)}')
    return ok


def mamba_ssm_module():
    """mamba_ssm's ssd_combined module through the tests' shims (None if it is not installed)."""
    if importlib.util.find_spec('mamba_ssm') is None:
        return None
    sys.path.insert(0, osp.join(ROOT, 'tests', 'test_ops'))
    import mamba_ssm_shims
    mamba_ssm_shims.enter_without_extension()
    return importlib.import_module('mamba_ssm.ops.triton.ssd_combined')


def scan_speed(device: str, tiny: bool) -> None:
    """Part b in its child process: ssd.py's table, ours at each chunk size against mamba_ssm
    x2 (on CPU, interpreted: each of mamba_ssm's autotuners keeps one config and its launches
    get a CPU context, the shims of tests/test_ops/mamba_ssm_shims.py)."""
    import contextlib

    import torch
    ssd = importlib.import_module('ssd')
    context = contextlib.nullcontext()
    if mamba_ssm_module() is None:
        print('# mamba_ssm is not installed: no mamba_ssm x2 rows; speed-ups against the '
              "paper's minimal listing", flush=True)
        with_mamba = False
    else:
        with_mamba = True
        if device == 'cpu':
            import mamba_ssm_shims
            mamba_ssm_shims.ssd_combined()
            context = mamba_ssm_shims.cpu_device_context()
    with context:
        ssd.run(TINY_SPEED_SHAPES if tiny else SPEED_SHAPES, torch.device(device),
                torch.float32 if tiny else torch.bfloat16, repeats=1 if tiny else 10,
                with_sequential=False, with_mamba_ssm=with_mamba, memory=device == 'cuda',
                backward=not tiny, chunk_sizes=CHUNK_SIZES, with_minimal=not with_mamba)


def parse_budgets(values: Sequence[str], tiny: bool) -> Dict[str, float]:
    budgets = {part: float(TINY_BUDGET if tiny else seconds) for part, seconds in BUDGETS.items()}
    for value in values:
        part, _, seconds = value.partition('=')
        if part not in PARTS:
            raise ValueError(f'--budget {value!r}: the part must be one of {sorted(PARTS)}')
        try:
            budgets[part] = float(seconds)
        except ValueError:
            raise ValueError(f'--budget {value!r}: expected PART=SECONDS, e.g. a=240')
        if budgets[part] <= 0:
            raise ValueError(f'--budget {value!r}: the seconds must be > 0')
    return budgets


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--device', default='cuda', choices=('cuda', 'cpu'),
                        help='cuda (default), or cpu with --tiny: the rehearsal')
    parser.add_argument('--tiny', action='store_true',
                        help='small sizes, on CPU under Triton\'s interpreter (needs --device cpu)')
    parser.add_argument('--parts', nargs='+', default=list(PARTS), choices=list(PARTS),
                        help='which parts to run, in the order a b c d (default: all)')
    parser.add_argument('--budget', action='append', default=[], metavar='PART=SECONDS',
                        help='one part\'s budget (default: ' + ', '.join(
                            f'{p}={s}' for p, s in BUDGETS.items()) + f'; {TINY_BUDGET} each '
                        'with --tiny); repeat for several')
    parser.add_argument('--out', default=os.environ.get('OUT') or 'work_dirs/gpu_check',
                        help='folder of the logs (default: $OUT, else work_dirs/gpu_check)')
    parser.add_argument('--scan-speed', action='store_true', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.device == 'cpu' and not args.tiny:
        parser.error('--device cpu needs --tiny: on CPU only the rehearsal runs')
    if args.tiny and args.device != 'cpu':
        parser.error('--tiny is the CPU rehearsal: give --device cpu with it')
    if args.scan_speed:
        scan_speed(args.device, args.tiny)
        return 0
    try:
        budgets = parse_budgets(args.budget, args.tiny)
    except ValueError as error:
        parser.error(str(error))
    import torch
    if args.device == 'cuda' and not torch.cuda.is_available():
        parser.error('--device cuda: torch.cuda.is_available() is False here')
    os.makedirs(args.out, exist_ok=True)
    start = time.monotonic()
    setup = Tee(osp.join(args.out, 'setup.log'))
    parts = [p for p in PARTS if p in args.parts]
    setup.line(f'gpu_check: parts {" ".join(parts)} on {args.device}'
               f'{" (tiny)" if args.tiny else ""}, budgets ' + ', '.join(
                   f'{p} {budgets[p]:.0f} s' for p in parts) + f', logs in {args.out}')
    ready = describe_setup(args.device, setup)
    setup.line(f'setup: {time.monotonic() - start:.1f} s')
    setup.close()
    rows, spare = [], 0.0
    for part in parts if ready else []:
        budget = budgets[part] + spare
        argv_, env = part_command(part, args.device, args.tiny)
        if args.tiny:  # one thread: two would crawl on a shared machine's busy cores
            env['OMP_NUM_THREADS'] = '1'
        elif 'TRITON_CACHE_AUTOTUNING' not in os.environ:  # reused by the later parts
            env['TRITON_CACHE_AUTOTUNING'] = '1'
        tee = Tee(osp.join(args.out, f'{part}.log'))
        tee.line(f'\n== part {part}, {PARTS[part]} (budget {budget:.0f} s): '
                 f'python {" ".join(argv_)}' + ''.join(f' {k}={v}' for k, v in env.items()))
        began = time.monotonic()
        status, code = run_part(argv_, env, budget, tee)
        took = time.monotonic() - began
        spare = max(0.0, budget - took)
        outcome = {'ok': 'ok', 'failed': f'FAILED (exit {code})',
                   'stopped': f'STOPPED at its budget of {budget:.0f} s'}[status]
        tee.line(f'== part {part}: {outcome}, {took:.0f} s')
        tee.close()
        rows.append((part, outcome, took))
    with open(osp.join(args.out, 'summary.md'), 'w') as summary:
        lines = ['| part | outcome | seconds |', '|---|---|---|'] + [
            f'| {p} {PARTS[p]} | {outcome} | {took:.0f} |' for p, outcome, took in rows]
        if not ready:
            lines.append('setup FAILED: an import every part needs (setup.log); no part ran')
        lines.append(f'total: {time.monotonic() - start:.0f} s')
        summary.write('\n'.join(lines) + '\n')
    print('\n' + '\n'.join(lines), flush=True)
    return 0 if ready and all(outcome == 'ok' for _, outcome, _ in rows) else 1


if __name__ == '__main__':
    sys.exit(main())
