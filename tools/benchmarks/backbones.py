"""Time and peak memory of DinoVim, LinearViT and mmpretrain's ViT, side by side.

    python tools/benchmarks/backbones.py                      # 224 / 448 / 768 / 1024 px
    python tools/benchmarks/backbones.py --sizes 224 448 --modes fwd
    python tools/benchmarks/backbones.py --device cuda --sizes 224 1248   # the Triton SSD path
    python tools/benchmarks/backbones.py --saved-tensors --sizes 512 --models DinoVim-T ViT
    python tools/benchmarks/backbones.py --device cuda --amp --batch 8 --sizes 224 1248 \
        --models DinoVim-T DeiT-T DinoVim-S DeiT-S DinoVim-B DeiT-B

Models (float32 unless --amp, eval mode, out_type='raw' so that the backward pass covers every
token): DinoVim-T (arch 'tiny'; +seg512: no-grad mixers in 512-token segments as the dense
configs run them; +cp: activation checkpointing), LinearViT and ViT with the same width, depth
and heads; on request DinoVim-S / -B and DeiT-T / -S / -B (mmpretrain's VisionTransformer with its
'deit-tiny' / 'deit-small' / 'deit-base' arch, the sizes Vim compares with; its attention is
torch's scaled_dot_product_attention). A size that runs out of memory (torch.OutOfMemoryError)
is retried at half the batch, down to 1 (the table notes it). Each (model, mode) runs in a fresh
subprocess over the sizes in increasing order: one warm-up run, then the median of up to
``--repeats`` runs (fewer when a run exceeds ``--point-seconds`` / repeats), as process CPU
time and wall time; ``--rounds`` R makes the models take turns R times and reports medians over
the rounds. Peak memory: benchmark_utils (on CPU with glibc's mmap threshold pinned; ``--malloc
adaptive`` keeps glibc's default, and the resident set then holds the heap's fragmentation too).
Prints a table per mode, the growth exponent of time in tokens, DinoVim / ViT (DeiT) ratios and,
on CPU, torch.profiler's operator table of one DinoVim-T mixer at the largest size.
"""
import argparse
import json
import math
import os.path as osp
import statistics
import subprocess
import sys

import torch

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from benchmark_utils import (PeakMemory, Timer, add_malloc_option, machine_line,  # noqa: E402
                             pin_malloc, table_header, table_row)

MODELS = ('DinoVim-T', 'LinearViT', 'ViT')
EXTRA_MODELS = ('DinoVim-T+cp', 'DinoVim-T+seg512', 'DinoVim-S', 'DinoVim-B', 'DeiT-T', 'DeiT-S',
                'DeiT-B')  # only when named in --models
DEIT_ARCHS = {'DeiT-T': 'deit-tiny', 'DeiT-S': 'deit-small', 'DeiT-B': 'deit-base'}
DINOVIM_ARCHS = {'T': 'tiny', 'S': 'small', 'B': 'base'}
# (DinoVim, baseline): the ratio columns of a table holding both
RATIOS = (('DinoVim-T', 'ViT'), ('DinoVim-T', 'DeiT-T'), ('DinoVim-S', 'DeiT-S'),
          ('DinoVim-B', 'DeiT-B'))
MODES = ('fwd', 'fwd+bwd')
VIT_ARCH = dict(embed_dims=256, num_layers=24, num_heads=4, feedforward_channels=1024)


def build(name: str) -> torch.nn.Module:
    from mmpretrain.models import VisionTransformer

    from dinomamba_mm.models.backbones import DinoVim, LinearViT
    if name in MODELS + EXTRA_MODELS and name.startswith('DinoVim-'):
        mixer_cfg = dict(segment_len=512) if name.endswith('+seg512') else None
        return DinoVim(arch=DINOVIM_ARCHS[name[len('DinoVim-')]], out_type='raw',
                       drop_path_rate=0., with_cp=name.endswith('+cp'), mixer_cfg=mixer_cfg)
    if name == 'LinearViT':
        return LinearViT(arch=dict(VIT_ARCH), out_type='raw')
    if name == 'ViT':
        return VisionTransformer(arch=dict(VIT_ARCH), out_type='raw')
    if name in DEIT_ARCHS:
        return VisionTransformer(arch=DEIT_ARCHS[name], out_type='raw')
    raise ValueError(f'unknown model {name!r}, expected one of {MODELS + EXTRA_MODELS}')


def worker(name: str, mode: str, sizes, repeats: int, point_seconds: float, threads: int,
           device: str = 'cpu', batch: int = 1, amp: bool = False,
           malloc: str = 'adaptive') -> None:
    """Measure one model in one mode at every size; one JSON line per size on stdout
    (``malloc='pinned'`` pins this process's glibc mmap threshold first)."""
    if malloc == 'pinned':
        pin_malloc()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = build(name).to(device)
    model.eval()  # mmpretrain's BaseBackbone.train returns None: no chaining
    params = sum(p.numel() for p in model.parameters())

    def measure(size: int, batch: int) -> dict:
        img = torch.randn(batch, 3, size, size, device=device)

        def run():
            autocast = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=amp)
            if mode == 'fwd':
                with torch.no_grad(), autocast:
                    model(img)
                return
            model.zero_grad(set_to_none=True)
            with autocast:
                out = model(img)[-1]
            out.float().pow(2).mean().backward()

        wall, cpu = [], []
        with PeakMemory(device) as memory:
            with Timer(device) as first:
                run()
            runs = max(1, min(repeats, int(point_seconds // max(first.wall, 1e-9))))
            for _ in range(runs):
                with Timer(device) as timer:
                    run()
                wall.append(timer.wall)
                cpu.append(timer.cpu)
        return dict(model=name, mode=mode, size=size, tokens=(size // 16)**2 + 1, batch=batch,
                    params=params, ms=1000 * statistics.median(wall),
                    cpu_ms=1000 * statistics.median(cpu), runs=runs, peak_mb=memory.mib)

    for size in sizes:
        fitting = batch
        while True:
            try:
                row = measure(size, fitting)
                break
            except torch.OutOfMemoryError:
                if fitting == 1:
                    raise
                model.zero_grad(set_to_none=True)
                if device == 'cuda':
                    torch.cuda.empty_cache()
                fitting //= 2
        print(json.dumps(row), flush=True)


def saved_tensors(name: str, size: int) -> str:
    """What the first block of ``name`` keeps for its backward pass at ``size`` px, float32,
    batch 1: a Markdown table of the tensors autograd saves (one row per storage; parameters
    left out), with the line of our code or mmpretrain's that saved each."""
    import traceback
    model = build(name)
    tokens = (size // 16)**2 + 1
    x = torch.randn(1, tokens, model.embed_dims, requires_grad=True)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages = {}

    def pack(t):
        key = t.untyped_storage().data_ptr()
        if key not in params and key not in storages:
            frames = [f for f in traceback.extract_stack()[:-1]
                      if '/torch/' not in f.filename and f.filename != __file__]
            where = f'{osp.basename(frames[-1].filename)}:{frames[-1].lineno}' if frames else '?'
            storages[key] = (t.untyped_storage().nbytes(), tuple(t.shape), where)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.layers[0](x)
    rows = sorted(storages.values(), key=lambda r: -r[0])
    lines = [table_header(['bytes / token', 'shape (one view of the storage)', 'saved at'])]
    lines += [table_row([f'{n / tokens:.0f}', shape, where]) for n, shape, where in rows]
    total = sum(r[0] for r in rows) / tokens
    return '\n'.join(lines + [f'total: {total:.0f} bytes / token ({tokens} tokens)'])


def profile_mixer(size: int) -> str:
    """torch.profiler's table of the operators of one DinoVim-T mixer's no-grad forward on
    (size / 16)^2 + 1 tokens (in one pass), by total CPU time."""
    from dinomamba_mm.models.layers import BidirectionalMamba2Mixer
    torch.manual_seed(0)
    mixer = BidirectionalMamba2Mixer(256).eval()
    tokens = torch.randn(1, (size // 16)**2 + 1, 256)
    with torch.no_grad():
        mixer(tokens)  # warm-up
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            mixer(tokens)
    return prof.key_averages().table(sort_by='cpu_time_total', row_limit=15)


def report(results: dict, models, modes, sizes, key: str, label: str, setting: str) -> None:
    """Markdown table of ``key`` ('cpu_ms' or 'ms') and peak MB, ratios, growth exponents.

    A size that some model did not finish (its worker failed) is left out of the table. A model
    that ran a size at a smaller batch than the others (out of memory) has it after its time;
    time ratios are then per image, and its memory ratios are left empty.
    """
    for mode in modes:
        done = [s for s in sizes if all((m, mode, s) in results for m in models)]
        print(f'\n{mode}, {label} (ms) and peak memory (MB), {setting}')
        if len(done) < len(sizes):
            print(f'(sizes {sorted(set(sizes) - set(done))} left out: not every model '
                  'finished them)')
        if not done:
            continue
        pairs = [(a, b) for a, b in RATIOS if a in models and b in models]
        print(table_header(['size', 'tokens'] + [f'{m} {unit}' for m in models
                                                 for unit in ('ms', 'MB')]
                           + [f'{a} / {b} {what}' for a, b in pairs
                              for what in ('time', 'memory')]))
        for size in done:
            cells = {m: results[(m, mode, size)] for m in models}
            largest = max(c.get('batch', 1) for c in cells.values())
            ratios = []
            for a, b in pairs:
                ca, cb = cells[a], cells[b]
                per_image = cb.get('batch', 1) / ca.get('batch', 1)
                ratios.append(f'{ca[key] / cb[key] * per_image:.2f}')
                ratios.append(f"{ca['peak_mb'] / cb['peak_mb']:.2f}"
                              if per_image == 1 and cb['peak_mb'] > 0 else '')
            print(table_row([size, next(iter(cells.values()))['tokens']] + [
                f'{c[key]:.1f}' + (f' (batch {c["batch"]})' if c.get('batch', 1) < largest
                                   else '') + f' | {c["peak_mb"]:.0f}'
                for c in cells.values()] + ratios))
        if len(done) > 1:
            lo, hi = done[0], done[-1]
            slopes = []
            for m in models:
                a, b = results[(m, mode, lo)], results[(m, mode, hi)]
                slope = math.log(b[key] / a[key]) / math.log(b['tokens'] / a['tokens'])
                slopes.append(f'{m} {slope:.2f}')
            print(f'growth exponent of {label} in tokens ({lo}->{hi} px): ' + ', '.join(slopes))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--sizes', type=int, nargs='+', default=[224, 448, 768, 1024],
                        help='image sides in pixels (default: 224 448 768 1024)')
    parser.add_argument('--models', nargs='+', default=list(MODELS),
                        choices=MODELS + EXTRA_MODELS,
                        help='backbones to time (default: %(default)s; +cp: activation '
                        'checkpointing, +seg512: no-grad mixers in 512-token segments)')
    parser.add_argument('--modes', nargs='+', default=list(MODES), choices=MODES,
                        help='forward only and / or forward + backward (default: both)')
    parser.add_argument('--repeats', type=int, default=3,
                        help='timed runs per point at most, fewer when a run exceeds '
                        '--point-seconds / repeats (default 3)')
    parser.add_argument('--threads', type=int, default=1,
                        help='torch threads per worker (1: CPU time is robust to a shared '
                        'machine; wall time is printed too)')
    parser.add_argument('--point-seconds', type=float, default=30.,
                        help='time budget per (model, mode, size) after the warm-up run')
    parser.add_argument('--device', default='cpu', choices=('cpu', 'cuda'),
                        help='cuda: wall time between synchronisations and peak allocated '
                        'GPU memory (the CPU mixer profile is skipped)')
    parser.add_argument('--batch', type=int, default=1, help='images per forward')
    parser.add_argument('--amp', action='store_true',
                        help='run the models under bf16 autocast (default: float32)')
    parser.add_argument('--rounds', type=int, default=1,
                        help='times the models take turns; figures are medians over rounds')
    parser.add_argument('--no-profile', action='store_true',
                        help='skip the mixer profile at the largest size')
    parser.add_argument('--profile-only', action='store_true',
                        help='only the mixer profile at the largest size')
    parser.add_argument('--saved-tensors', action='store_true',
                        help='only what one block of each model keeps for backward, per tensor, '
                        'at the largest size')
    add_malloc_option(parser)
    parser.add_argument('--worker', nargs=2, metavar=('MODEL', 'MODE'), help=argparse.SUPPRESS)
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    sizes = sorted(args.sizes)
    if args.batch < 1 or args.rounds < 1:
        parser.error(f'--batch and --rounds must be >= 1, got {args.batch} and {args.rounds}')
    if args.worker:
        return worker(*args.worker, sizes, args.repeats, args.point_seconds, args.threads,
                      args.device, args.batch, args.amp, args.malloc)
    if args.device == 'cuda' and not torch.cuda.is_available():
        parser.error('--device cuda: no CUDA device is available here')
    torch.set_num_threads(args.threads)
    if args.saved_tensors:
        for name in args.models:
            print(f'\n{name}, first block, {sizes[-1]} px:\n{saved_tensors(name, sizes[-1])}')
        return
    print('machine (start):', machine_line(args.device), flush=True)
    rounds = {}
    for round_ in range(args.rounds):
        for mode in ([] if args.profile_only else args.modes):
            for name in args.models:
                cmd = [sys.executable, __file__, '--worker', name, mode, '--repeats',
                       str(args.repeats), '--point-seconds', str(args.point_seconds),
                       '--threads', str(args.threads), '--device', args.device, '--batch',
                       str(args.batch), '--malloc', args.malloc, '--sizes', *map(str, sizes)] + \
                    (['--amp'] if args.amp else [])
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode != 0:
                    # the sizes it finished are kept; the tables leave out the sizes it did not
                    tail = '\n    '.join(proc.stderr.strip().splitlines()[-6:])
                    print(f'  {name} {mode}: worker failed (exit {proc.returncode}):\n    {tail}',
                          flush=True)
                for line in proc.stdout.splitlines():
                    row = json.loads(line)
                    rounds.setdefault((row['model'], row['mode'], row['size']), []).append(row)
                    print(f"  round {round_ + 1} {name:<10} {mode:<8} {row['size']:>5}px cpu "
                          f"{row['cpu_ms']:>10.1f} ms  wall {row['ms']:>10.1f} ms "
                          f"{row['peak_mb']:>9.1f} MB (batch {row['batch']}, runs "
                          f"{row['runs']})", flush=True)
    results = {key: dict(rows[0], cpu_ms=statistics.median(r['cpu_ms'] for r in rows),
                         ms=statistics.median(r['ms'] for r in rows),
                         peak_mb=max(r['peak_mb'] for r in rows))
               for key, rows in rounds.items()}
    if results:
        params = {r['model']: r['params'] for r in results.values()}
        print('\nparameters: ' + ', '.join(f'{m} {params[m] / 1e6:.1f}M' for m in params))
        setting = f"batch {args.batch}, {'bf16 autocast' if args.amp else 'float32'}"
        if args.device == 'cpu':
            setting += f', malloc {args.malloc}'
        for key, label in ((('cpu_ms', 'CPU time'), ) if args.device == 'cpu' else ()) + (
                ('ms', 'wall time'), ):
            report(results, args.models, args.modes, sizes, key, label, setting)
    if not args.no_profile and args.device == 'cpu':
        size = sizes[-1]
        print(f'\nDinoVim-T mixer at {size}px ({(size // 16)**2 + 1} tokens), one block, '
              f'no grad, one pass:\n{profile_mixer(size)}')
    print('\nmachine (end):', machine_line(args.device))


if __name__ == '__main__':
    main()
