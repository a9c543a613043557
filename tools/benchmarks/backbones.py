"""Time and peak memory of DinoVim-T, LinearViT and mmpretrain's ViT at matched width, side by side.

    python tools/benchmarks/backbones.py                      # 224 / 448 / 768 / 1024 px
    python tools/benchmarks/backbones.py --sizes 224 448 --modes fwd
    python tools/benchmarks/backbones.py --device cuda --sizes 224 1248   # on a GPU (the SSD
                                                   # op's dispatcher then runs the Triton path)

Models (batch ``--batch``, 1 by default, float32, eval mode, out_type='raw' so the backward pass covers every token):
  DinoVim-T  : DinoVim arch 'tiny': width 256, 24 blocks, d_inner 512, 8 heads x 64, d_state 64,
               chunk 256 (SSD op picked by its dispatcher: the chunked torch path on CPU);
               its no-grad forward in one pass (+seg512: in 512-token segments, as the dense
               configs run it; +ssd-products: its SSD scan runs only its batched products on
               warm operands, the floor of the scan, CPU forward only)
  LinearViT  : width 256, 24 layers, 4 heads x 64, FFN 1024, phi(Q)(phi(K)^T V) attention
  ViT        : mmpretrain VisionTransformer, the same arch dict (softmax attention)
For each (model, mode) a fresh subprocess (``--threads`` torch threads, 1 by default) runs the
sizes in increasing order; per size: one warm-up run, then the median of up to ``--repeats`` runs
(fewer when one run exceeds ``--point-seconds`` / repeats), as process CPU time (robust to other
jobs on a shared machine) and wall time. With ``--rounds`` R the models take turns R times
(model A, B, C, A, B, C, ...) and each figure is the median over the rounds, so that a change of
the machine's load hits every model alike. Peak memory = rise of the process's resident
high-water mark (VmHWM) over the size's runs, measured from the RSS after freed heap memory is
returned (malloc_trim) and VmHWM is reset (/proc/self/clear_refs); it includes the weights'
gradients in 'fwd+bwd'.
Prints a table, the log-log slope of time vs tokens from the smallest to the largest size
(the growth exponent), DinoVim / ViT ratios, a per-part profile of one DinoVim mixer at the
largest size (the parts of its one-pass forward, then the whole mixer in one pass and in
512-token no-grad segments), and the machine (platform, CPUs, load average, torch and thread count).
"""
import argparse
import ctypes
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

MODELS = ('DinoVim-T', 'LinearViT', 'ViT')
# only when named in --models: with activation checkpointing; with the no-grad forward in
# 512-token segments instead of one pass (segment_len=512, as the dense configs set it); with
# an SSD scan that runs only its batched products (forward only, see scan_products_only)
EXTRA_MODELS = ('DinoVim-T+cp', 'DinoVim-T+seg512', 'DinoVim-T+ssd-products')
CPU_FORWARD_ONLY = ('DinoVim-T+ssd-products', )


def measured(name: str, mode: str, device: str) -> bool:
    """Whether the model ``name`` is timed in ``mode`` on ``device``."""
    return name not in CPU_FORWARD_ONLY or (mode == 'fwd' and device == 'cpu')
MODES = ('fwd', 'fwd+bwd')
VIT_ARCH = dict(embed_dims=256, num_layers=24, num_heads=4, feedforward_channels=1024)


def build(name: str):
    import torch  # noqa: F401
    from mmpretrain.models import VisionTransformer

    from dinomamba_mm.models.backbones import DinoVim, LinearViT
    if name.startswith('DinoVim-T'):
        mixer_cfg = dict(segment_len=512) if name.endswith('+seg512') else None
        return DinoVim(arch='tiny', out_type='raw', drop_path_rate=0.,
                       with_cp=name.endswith('+cp'), mixer_cfg=mixer_cfg)
    if name == 'LinearViT':
        return LinearViT(arch=dict(VIT_ARCH), out_type='raw')
    if name == 'ViT':
        return VisionTransformer(arch=dict(VIT_ARCH), out_type='raw')
    raise ValueError(f'unknown model {name!r}, expected one of {MODELS + EXTRA_MODELS}')


def scan_products_only() -> None:
    """Make the DinoVim mixers' SSD scan run only its batched products and return zeros: the
    products recorded at the first call of each shape and replayed on warm operands by
    ``tools/benchmarks/ssd.py``'s ProductReplay. The forward then costs what DinoVim-T would cost
    if everything in the scan but its products were free, the floor of the scan's work."""
    import importlib.util

    import torch

    from dinomamba_mm.models.layers import bidirectional_mamba2 as mixer_module
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'ssd.py')
    spec = importlib.util.spec_from_file_location('ssd_benchmark', path)
    ssd_benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ssd_benchmark)
    scan, replays = mixer_module.ssd_scan_bidirectional, {}

    def products_only(x, **kwargs):
        key = tuple(x[0].shape)
        if key not in replays:
            calls = ssd_benchmark.record_products(lambda: scan(x=x, **kwargs), backward=False)
            replays[key] = ssd_benchmark.ProductReplay(calls)
        replays[key].run('fwd')
        return torch.zeros_like(x[0]), torch.zeros_like(x[1])

    mixer_module.ssd_scan_bidirectional = products_only


def rss_mb() -> float:
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20


def reset_peak_rss() -> float:
    """Return freed heap memory to the OS, reset VmHWM; returns the RSS (MB) after that."""
    gc.collect()
    ctypes.CDLL('libc.so.6').malloc_trim(0)
    with open('/proc/self/clear_refs', 'w') as f:
        f.write('5')
    return rss_mb()


def peak_rss_mb() -> float:
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmHWM:'):
                return int(line.split()[1]) / 1024
    raise RuntimeError('no VmHWM in /proc/self/status')


def worker(name: str, mode: str, sizes, repeats: int, point_seconds: float,
           threads: int, device: str = 'cpu', batch: int = 1, amp: bool = False) -> None:
    """Measure one model in one mode at every size; one JSON line per size on stdout.

    On CUDA the time is wall time between synchronisations and the memory is the rise of
    ``torch.cuda.max_memory_allocated`` over the allocation before the runs. ``amp`` runs the
    model under bf16 autocast.
    """
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cuda = device == 'cuda'
    if not measured(name, mode, device):
        raise ValueError(f'{name} runs the forward on CPU only, got {mode} on {device}')
    if name.endswith('+ssd-products'):
        scan_products_only()
    model = build(name).to(device)
    model.eval()  # mmpretrain's BaseBackbone.train returns None: no chaining
    params = sum(p.numel() for p in model.parameters())
    for size in sizes:
        img = torch.randn(batch, 3, size, size, device=device)

        def run():
            autocast = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=amp)
            if mode == 'fwd':
                with torch.no_grad(), autocast:
                    model(img)
            else:
                model.zero_grad(set_to_none=True)
                with autocast:
                    out = model(img)[-1]
                out.float().pow(2).mean().backward()
            if cuda:
                torch.cuda.synchronize()

        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated() / 2**20
        else:
            before = reset_peak_rss()
        start = time.perf_counter()
        run()
        first = time.perf_counter() - start
        runs = max(1, min(repeats, int(point_seconds // max(first, 1e-9))))
        wall, cpu = [], []
        for _ in range(runs):
            start, start_cpu = time.perf_counter(), time.process_time()
            run()
            wall.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else peak_rss_mb()
        tokens = (size // 16)**2 + 1
        print(json.dumps(dict(model=name, mode=mode, size=size, tokens=tokens, params=params,
                              ms=1000 * statistics.median(wall),
                              cpu_ms=1000 * statistics.median(cpu), runs=runs,
                              peak_mb=max(0., peak - before))), flush=True)


def profile_mixer(size: int, repeats: int = 3) -> list:
    """CPU milliseconds of each part of one DinoVim-T mixer on (size / 16)^2 + 1 tokens.

    The parts are those of the one-pass (whole-sequence) forward; the mixer is then timed
    whole both ways: in one pass (the default) and in 512-token no-grad segments.
    """
    import torch

    from dinomamba_mm.models.layers import BidirectionalMamba2Mixer
    from dinomamba_mm.ops.ssd import ssd_scan_bidirectional
    torch.manual_seed(0)
    segments = 512
    mixer = BidirectionalMamba2Mixer(256, segment_len=segments)
    u = torch.randn(1, (size // 16)**2 + 1, 256)

    def timed(fn):
        fn()
        times = []
        for _ in range(repeats):
            start = time.process_time()
            out = fn()
            times.append(time.process_time() - start)
        return 1000 * statistics.median(times), out

    with torch.no_grad():
        t_proj, _ = timed(lambda: mixer.in_proj(u))
        t_inputs, inputs = timed(lambda: mixer.ssd_inputs(u))
        f, b = inputs['forward'], inputs['backward']
        t_scan, (y_f, y_b) = timed(lambda: ssd_scan_bidirectional(
            x=(f['x'], b['x']), dt=f['dt'], A=(f['A'], b['A']), B=(f['B'], b['B']),
            C=(f['C'], b['C']), chunk_size=mixer.chunk_size, D=(f['D'], b['D']),
            dt_bias=(f['dt_bias'], b['dt_bias']), dt_softplus=True))
        z = inputs['z']
        t_norm, y = timed(lambda: (mixer.norm(y_f.flatten(-2), z)
                                   + mixer.norm_b(y_b.flatten(-2), z)) / 2)
        t_out, _ = timed(lambda: mixer.out_proj(y))
        t_segments, _ = timed(lambda: mixer(u))
        mixer.segment_len = None
        t_whole, _ = timed(lambda: mixer(u))
    return [('in_proj', t_proj), ('conv1d x2 + SiLU + split', t_inputs - t_proj),
            ('SSD scan, both directions', t_scan), ('gated RMSNorm x2 + average', t_norm),
            ('out_proj', t_out), ('whole mixer, one pass', t_whole),
            (f'whole mixer, {segments}-token segments', t_segments)]


def machine(device: str = 'cpu') -> str:
    import torch
    gpu = ''
    if device == 'cuda':
        props = torch.cuda.get_device_properties(0)
        gpu = (f' | {props.name} ({props.total_memory / 2**30:.0f} GiB) | CUDA '
               f'{torch.version.cuda}')
    return (f'{platform.platform()} | {platform.processor() or platform.machine()} | '
            f'{os.cpu_count()} CPUs | load average {os.getloadavg()} | python '
            f'{platform.python_version()} | torch {torch.__version__} '
            f'({torch.get_num_threads()} threads){gpu}')


def report(results: dict, models, modes, sizes, key: str, label: str, setting: str,
           device: str) -> None:
    """Markdown table of ``key`` ('cpu_ms' or 'ms') and peak MB, ratios, growth exponents.

    A size that some model did not finish (its worker failed) is left out of the table.
    """
    all_models = models
    for mode in modes:
        models = [m for m in all_models if measured(m, mode, device)]
        done = [s for s in sizes if all((m, mode, s) in results for m in models)]
        print(f'\n{mode}, {label} (ms) and peak memory (MB), {setting}')
        if len(done) < len(sizes):
            print(f'(sizes {sorted(set(sizes) - set(done))} left out: not every model finished them)')
        if not done:
            continue
        print('| size | tokens | ' + ' | '.join(f'{m} ms | {m} MB' for m in models)
              + ' | DinoVim / ViT time | DinoVim / ViT memory |')
        print('|' + '---|' * (4 + 2 * len(models)))
        for size in done:
            cells = [results[(m, mode, size)] for m in models]
            time_ratio = memory_ratio = ''
            if 'DinoVim-T' in models and 'ViT' in models:
                dinovim, vit = results[('DinoVim-T', mode, size)], results[('ViT', mode, size)]
                time_ratio = f'{dinovim[key] / vit[key]:.2f}'
                if vit['peak_mb'] > 0:
                    memory_ratio = f"{dinovim['peak_mb'] / vit['peak_mb']:.2f}"
            print(f'| {size} | {cells[0]["tokens"]} | '
                  + ' | '.join(f'{c[key]:.1f} | {c["peak_mb"]:.0f}' for c in cells)
                  + f' | {time_ratio} | {memory_ratio} |')
        if len(done) > 1:
            lo, hi = done[0], done[-1]
            slopes = []
            for m in models:
                a, b = results[(m, mode, lo)], results[(m, mode, hi)]
                slope = math.log(b[key] / a[key]) / math.log(b['tokens'] / a['tokens'])
                slopes.append(f'{m} {slope:.2f}')
            print(f'growth exponent of {label} in tokens ({lo}->{hi} px): ' + ', '.join(slopes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--sizes', type=int, nargs='+', default=[224, 448, 768, 1024],
                        help='image sides in pixels (default: 224 448 768 1024)')
    parser.add_argument('--models', nargs='+', default=list(MODELS),
                        choices=MODELS + EXTRA_MODELS,
                        help='backbones to time (default: %(default)s; +cp: activation '
                        'checkpointing, +seg512: no-grad mixers in 512-token segments, '
                        '+ssd-products: an SSD scan of its products only, CPU forward only)')
    parser.add_argument('--modes', nargs='+', default=list(MODES), choices=MODES,
                        help='forward only and / or forward + backward (default: both)')
    parser.add_argument('--repeats', type=int, default=3,
                        help='timed runs per point at most, fewer when a run exceeds --point-seconds / '
                        'repeats (default 3)')
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
                        help='skip the per-part mixer profile at the largest size')
    parser.add_argument('--profile-only', action='store_true',
                        help='only the per-part mixer profile at the largest size')
    parser.add_argument('--worker', nargs=2, metavar=('MODEL', 'MODE'), help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = sorted(args.sizes)
    if args.batch < 1:
        parser.error(f'--batch must be >= 1, got {args.batch}')
    if args.rounds < 1:
        parser.error(f'--rounds must be >= 1, got {args.rounds}')
    if args.worker:
        worker(*args.worker, sizes, args.repeats, args.point_seconds, args.threads,
               args.device, args.batch, args.amp)
        return

    import torch
    if args.device == 'cuda' and not torch.cuda.is_available():
        parser.error('--device cuda: no CUDA device is available here')
    torch.set_num_threads(args.threads)
    print('machine (start):', machine(args.device), flush=True)
    rounds = {}
    for round_ in range(args.rounds):
        for mode in ([] if args.profile_only else args.modes):
            for name in args.models:
                if not measured(name, mode, args.device):
                    continue
                cmd = [sys.executable, __file__, '--worker', name, mode, '--repeats',
                       str(args.repeats), '--point-seconds', str(args.point_seconds),
                       '--threads', str(args.threads), '--device', args.device, '--batch',
                       str(args.batch), '--sizes', *map(str, sizes)] + \
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
                    print(f"  round {round_ + 1} {row['model']:<10} {row['mode']:<8} "
                          f"{row['size']:>5}px cpu {row['cpu_ms']:>10.1f} ms  wall "
                          f"{row['ms']:>10.1f} ms {row['peak_mb']:>9.1f} MB (runs {row['runs']})",
                          flush=True)
    results = {key: dict(rows[0], cpu_ms=statistics.median(r['cpu_ms'] for r in rows),
                         ms=statistics.median(r['ms'] for r in rows),
                         peak_mb=max(r['peak_mb'] for r in rows))
               for key, rows in rounds.items()}

    if results:
        params = {r['model']: r['params'] for r in results.values()}
        print('\nparameters: ' + ', '.join(f'{m} {params[m] / 1e6:.1f}M' for m in params))
        setting = f"batch {args.batch}, {'bf16 autocast' if args.amp else 'float32'}"
        if args.device == 'cpu':
            report(results, args.models, args.modes, sizes, 'cpu_ms', 'CPU time', setting,
                   args.device)
        report(results, args.models, args.modes, sizes, 'ms', 'wall time', setting, args.device)

    if not args.no_profile and args.device == 'cpu':
        size = sizes[-1]
        print(f'\nDinoVim-T mixer parts at {size}px ({(size // 16)**2 + 1} tokens), one block, '
              'no grad, CPU time (median of 3):')
        for part, ms in profile_mixer(size):
            print(f'  {part:<36} {ms:>9.1f} ms')
    print('\nmachine (end):', machine(args.device))


if __name__ == '__main__':
    main()
