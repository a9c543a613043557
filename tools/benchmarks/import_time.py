"""Time ``import dinomamba_mm`` against ``import torch, mmengine.runner``, side by side.

Each timing is a fresh interpreter that measures its own import statement (wall and CPU time,
``time.perf_counter`` / ``time.process_time``; interpreter start-up excluded); the two
statements alternate, after warm-up runs that fill the file cache, so that load changes on a
shared machine hit both alike. Prints the machine, the median and spread of each, and the
ratios of the medians (goal: ``import dinomamba_mm`` within 1.3x of the baseline, which it
includes: torch and mmengine are what the package needs).

Example::

    python tools/benchmarks/import_time.py --repeats 9
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from typing import Dict, List

BASELINE = 'import torch, mmengine.runner'
SUBJECT = 'import dinomamba_mm'
GOAL = 1.3

PROBE = '''
import json, time
wall, cpu = time.perf_counter(), time.process_time()
exec({statement!r})
print('RESULT', json.dumps([time.perf_counter() - wall, time.process_time() - cpu]))
'''


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--repeats', type=int, default=7,
                        help='timed runs of each statement (default 7)')
    parser.add_argument('--warmup', type=int, default=1,
                        help='untimed runs of each statement first (default 1)')
    parser.add_argument('--python', default=sys.executable,
                        help='interpreter to time (default: the one running this script)')
    args = parser.parse_args()
    if args.repeats < 1 or args.warmup < 0:
        parser.error(f'--repeats must be >= 1 and --warmup >= 0, got {args.repeats} and '
                     f'{args.warmup}')
    return args


def time_import(python: str, statement: str) -> List[float]:
    """[wall seconds, CPU seconds] of ``statement`` in a fresh interpreter."""
    proc = subprocess.run([python, '-c', PROBE.format(statement=statement)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f'{statement!r} failed:\n{proc.stderr[-2000:]}')
    line = [line for line in proc.stdout.splitlines() if line.startswith('RESULT ')][-1]
    return json.loads(line[len('RESULT '):])


def machine(python: str) -> str:
    versions = subprocess.run(
        [python, '-c', 'import platform, torch, mmengine; print(platform.python_version(), '
         'torch.__version__, mmengine.__version__)'],
        capture_output=True, text=True, check=True).stdout.split()
    load = ', '.join(f'{x:.2f}' for x in os.getloadavg())
    return (f'{platform.platform()} | {platform.processor() or platform.machine()} | '
            f'{os.cpu_count()} CPUs | load average {load} | Python {versions[0]} | '
            f'torch {versions[1]} | mmengine {versions[2]}')


def summary(values: List[float]) -> str:
    return f'median {statistics.median(values):6.2f} s (min {min(values):.2f}, ' \
           f'max {max(values):.2f})'


def main() -> Dict[str, float]:
    args = parse_args()
    print('machine (start):', machine(args.python), flush=True)
    statements = (BASELINE, SUBJECT)
    for _ in range(args.warmup):
        for statement in statements:
            time_import(args.python, statement)
    runs = {statement: [] for statement in statements}
    for _ in range(args.repeats):
        for statement in statements:
            runs[statement].append(time_import(args.python, statement))
    ratios = {}
    for index, kind in enumerate(('wall', 'CPU')):
        print(f'\n{kind} time, {args.repeats} fresh interpreters each (alternating):')
        for statement in statements:
            print(f'  {statement:32s} {summary([run[index] for run in runs[statement]])}')
        ratios[kind] = statistics.median(run[index] for run in runs[SUBJECT]) / \
            statistics.median(run[index] for run in runs[BASELINE])
        print(f'  ratio (median / median): {ratios[kind]:.2f}x (goal <= {GOAL}x)')
    print('\nmachine (end):', machine(args.python))
    return ratios


if __name__ == '__main__':
    main()
