"""The README demo: DINO on the synthetic shapes, then a linear probe of DINO vs random init.

Steps (each through the stock mmengine Runner and the project's configs):

1. generate ``data/synthetic_demo`` with ``tools/data/make_synthetic.py`` when it is missing
   (classification layout: 4000 train / 2000 val images of 72 px, enough val images for a
   difference of a few points to stand out; ADE layout: the generator's default);
2. DINO-pretrain a small DinoVim (``configs/demo/dino_dinovim-demo_synthetic.py``);
3. linear-probe its EMA teacher, and the same DinoVim at random initialisation
   (``configs/demo/linear-probe_dinovim-demo_synthetic.py``), on the 7 shape classes;
4. Binary-AUC of the class-token similarity map of the last block on the synthetic
   ADE-style val images, for both backbones (``tools/analysis/binary_auc.py``);
5. print the table (probe top-1, Binary-AUC) and where logs, checkpoints and plots went.

Usage::

    python tools/demo.py [--work-dir work_dirs/demo] [--seed 0] [--quick]

``--quick`` runs every step on a few images for one epoch (a smoke test; its numbers mean
nothing).
"""
import argparse
import contextlib
import importlib.util
import json
import os
import os.path as osp
import subprocess
import sys
import time
import warnings
from typing import Dict, List, Optional, Sequence

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
DINO_CONFIG = osp.join(REPO, 'configs/demo/dino_dinovim-demo_synthetic.py')
PROBE_CONFIG = osp.join(REPO, 'configs/demo/linear-probe_dinovim-demo_synthetic.py')
AUC_DATA_CONFIG = osp.join(REPO, 'configs/demo/synthetic-ade_binary-auc_48px.py')
MAKE_SYNTHETIC = osp.join(REPO, 'tools/data/make_synthetic.py')
BINARY_AUC_TOOL = osp.join(REPO, 'tools/analysis/binary_auc.py')

#: --quick: images per split, epochs, Binary-AUC images
QUICK = dict(train_images=64, val_images=50, dino_epochs=1, probe_epochs=1, auc_images=4)
#: make_synthetic.py options of the demo's layouts (the ADE layout keeps the generator defaults)
DEMO_DATA = dict(cls=['--num-train', '4000', '--num-val', '2000', '--size', '72'], ade=[])


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--work-dir', default='work_dirs/demo',
                        help='where logs, checkpoints, plots and results go')
    parser.add_argument('--seed', type=int, default=0, help='seed of every run')
    parser.add_argument('--quick', action='store_true',
                        help='a much shorter run on a few images (smoke test)')
    parser.add_argument('--data-root', default=osp.join(REPO, 'data/synthetic_demo'),
                        help='synthetic dataset root: <root>/cls and <root>/ade (generated '
                             'there when missing)')
    return parser.parse_args(argv)


# ------------------------------------------------------------------------------ display
class Display:
    """One status line per step, redrawn in place on a terminal, printed per epoch otherwise."""

    def __init__(self, num_steps: int, stream=sys.stdout) -> None:
        self.num_steps = num_steps
        self.stream = stream
        self.tty = stream.isatty()
        self.step = 0
        self.step_start = time.time()
        self.start = time.time()

    def begin(self, title: str) -> None:
        self.step += 1
        self.step_start = time.time()
        self.title = title
        self._write(f'[{self.step}/{self.num_steps}] {title} ...', final=not self.tty)

    def progress(self, done: int, total: int, detail: str = '',
                 final: bool = False) -> None:
        width = 24
        filled = int(width * done / max(total, 1))
        elapsed = time.time() - self.step_start
        eta = elapsed / done * (total - done) if done else 0.0
        bar = '#' * filled + '-' * (width - filled)
        line = (f'[{self.step}/{self.num_steps}] {self.title} |{bar}| {done}/{total} '
                f'{detail} elapsed {elapsed:4.0f}s eta {eta:4.0f}s')
        if self.tty or final:
            self._write(line, final=final)

    def end(self, summary: str) -> None:
        self._write(f'[{self.step}/{self.num_steps}] {self.title}: {summary} '
                    f'({time.time() - self.step_start:.0f}s)', final=True)

    def _write(self, line: str, final: bool) -> None:
        if self.tty:
            self.stream.write('\r\033[K' + line + ('\n' if final else ''))
        else:
            self.stream.write(line + '\n')
        self.stream.flush()


def progress_hook(display: Display):
    """An mmengine hook feeding the training iterations and the final metrics to ``display``."""
    from mmengine.hooks import Hook

    class DemoProgressHook(Hook):
        priority = 'VERY_LOW'

        def __init__(self) -> None:
            self.metrics: Dict[str, float] = {}
            self.losses: List[float] = []

        def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
            loss = float(outputs['loss']) if outputs and 'loss' in outputs else float('nan')
            self.losses.append(loss)
            epoch_len = len(runner.train_dataloader)
            display.progress(runner.iter + 1, runner.max_iters,
                             f'epoch {runner.epoch + 1}/{runner.max_epochs} loss {loss:.3f}',
                             final=batch_idx + 1 == epoch_len and not display.tty
                             and (runner.epoch + 1) % max(1, runner.max_epochs // 5) == 0)

        def after_val_epoch(self, runner, metrics=None) -> None:
            self.metrics.update(metrics or {})

    return DemoProgressHook()


# --------------------------------------------------------------------------------- steps
def ensure_data(data_root: str, display: Display) -> None:
    """Generate the layouts the demo reads (cls, ade) under ``data_root`` when missing, with
    the options of ``DEMO_DATA``; layouts already there are used as they are."""
    sys.path.insert(0, osp.join(REPO, 'tools/data'))
    from synthetic_layout import check_layout
    missing = []
    for kind in ('cls', 'ade'):
        try:
            check_layout(osp.join(data_root, kind), kind)
        except FileNotFoundError:
            missing.append(kind)
    for kind in missing:
        subprocess.run([sys.executable, MAKE_SYNTHETIC, '--out', data_root, '--seed', '0',
                        '--layouts', kind, *DEMO_DATA[kind]], check=True,
                       stdout=subprocess.DEVNULL)
    counts = []
    for split in ('train', 'val'):
        with open(osp.join(data_root, 'cls', 'meta', f'{split}.txt')) as f:
            counts.append(sum(1 for line in f if line.strip()))
    action = f'generated {", ".join(missing)} under' if missing else 'found'
    display.end(f'{action} {data_root} (classification: {counts[0]} train / {counts[1]} val '
                f'images)')


def set_epochs(cfg, epochs: int, warmup: int = 0) -> None:
    """Set the epoch count of a config, its cosine (+ warm-up) schedule and checkpoint/val."""
    schedule = []
    if warmup:
        schedule.append(dict(type='LinearLR', start_factor=1e-3, end_factor=1.0,
                             by_epoch=True, begin=0, end=warmup,
                             convert_to_iter_based=True))
    cosine = dict(cfg.param_scheduler[-1])
    cosine.update(T_max=epochs - warmup, begin=warmup, end=epochs)
    schedule.append(cosine)
    cfg.param_scheduler = schedule
    cfg.train_cfg.max_epochs = epochs
    if 'val_interval' in cfg.train_cfg:
        cfg.train_cfg.val_interval = epochs
    cfg.default_hooks.checkpoint.interval = epochs


def limit_images(loader_cfg, num_images: Optional[int]) -> None:
    if num_images is not None:
        loader_cfg.dataset.indices = num_images


@contextlib.contextmanager
def console_to(path: str):
    """Send everything written to file descriptors 1 and 2 (mmengine's console log, progress
    bars, warnings, data workers) to ``path``; yields a stream on the original stdout."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    display_stream = os.fdopen(os.dup(saved[0]), 'w')
    with open(path, 'a') as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield display_stream
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            display_stream.close()


def run(cfg, display: Display):
    """Train ``cfg`` with the stock Runner (its console output goes to the demo's log)."""
    from mmengine.runner import Runner
    runner = Runner.from_cfg(cfg)
    hook = progress_hook(display)
    runner.register_hook(hook)
    runner.train()
    return runner, hook


def pretrain_dino(args, display: Display) -> str:
    from mmengine.config import Config
    cfg = Config.fromfile(DINO_CONFIG)
    cfg.work_dir = osp.join(args.work_dir, 'dino')
    cfg.randomness = dict(seed=args.seed, deterministic=False)
    cfg.train_dataloader.dataset.data_root = osp.join(args.data_root, 'cls')
    if args.quick:
        set_epochs(cfg, QUICK['dino_epochs'])
        limit_images(cfg.train_dataloader, QUICK['train_images'])
    runner, hook = run(cfg, display)
    checkpoint = osp.join(cfg.work_dir, f'epoch_{runner.max_epochs}.pth')
    display.end(f'loss {hook.losses[0]:.3f} -> {hook.losses[-1]:.3f}, '
                f'checkpoint {checkpoint}')
    return checkpoint


def linear_probe(args, display: Display, name: str, checkpoint: Optional[str]):
    """Linear-probe the teacher of ``checkpoint`` (None: random init); returns (top-1, ckpt)."""
    from mmengine.config import Config
    cfg = Config.fromfile(PROBE_CONFIG)
    cfg.work_dir = osp.join(args.work_dir, f'probe_{name}')
    cfg.randomness = dict(seed=args.seed, deterministic=False)
    cfg.model.backbone.checkpoint = checkpoint
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        cfg[loader].dataset.data_root = osp.join(args.data_root, 'cls')
    if args.quick:
        set_epochs(cfg, QUICK['probe_epochs'])
        limit_images(cfg.train_dataloader, QUICK['train_images'])
        limit_images(cfg.val_dataloader, QUICK['val_images'])
    runner, hook = run(cfg, display)
    top1 = hook.metrics['accuracy/top1']
    display.end(f'top-1 {top1:.1f}%')
    return top1, osp.join(cfg.work_dir, f'epoch_{runner.max_epochs}.pth')


def binary_auc(args, display: Display, name: str, probe_checkpoint: str) -> float:
    """Mean Binary-AUC of the last block's class-token similarity map (analysis tool)."""
    spec = importlib.util.spec_from_file_location('binary_auc_tool', BINARY_AUC_TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    out_dir = osp.join(args.work_dir, f'binary_auc_{name}')
    argv = [DINO_CONFIG, '--checkpoint', probe_checkpoint,
            '--checkpoint-prefix', 'backbone.backbone.',
            '--data-config', AUC_DATA_CONFIG, '--data-root', osp.join(args.data_root, 'ade'),
            '--map-type', 'similarity', '--layers', '-1', '--out-dir', out_dir]
    if args.quick:
        argv += ['--num-images', str(QUICK['auc_images'])]
    os.makedirs(out_dir, exist_ok=True)
    tool.main(argv)
    with open(osp.join(out_dir, 'binary_auc.csv')) as f:
        rows = f.read().splitlines()
    header, first = rows[0].split(','), rows[1].split(',')
    auc = float(first[header.index('auc_mean')])
    display.end(f'Binary-AUC {auc:.3f}')
    return auc


def plot_loss(dino_work_dir: str, out_path: str) -> Optional[str]:
    """DINO loss per iteration from the run's scalars.json (LocalVisBackend)."""
    import glob
    found = sorted(glob.glob(osp.join(dino_work_dir, '*', 'vis_data', 'scalars.json')))
    if not found:
        return None
    iters, losses = [], []
    with open(found[-1]) as f:
        for line in f:
            record = json.loads(line)
            if 'loss' in record:
                iters.append(record['iter'])
                losses.append(record['loss'])
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(iters, losses)
    ax.set(xlabel='iteration', ylabel='DINO loss', title='DINO pretraining (synthetic shapes)')
    fig.tight_layout()
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return out_path


def format_table(results: Dict[str, dict]) -> str:
    lines = ['| backbone (DinoVim, frozen) | probe top-1 (%) | Binary-AUC (last block) |',
             '|---|---|---|']
    for label, key in (('DINO teacher', 'dino'), ('random init', 'random')):
        lines.append(f"| {label} | {results[key]['top1']:.1f} | {results[key]['auc']:.3f} |")
    return '\n'.join(lines)


def run_steps(args, display: Display) -> Dict[str, dict]:
    """Steps 1-7; returns {'dino': {'top1', 'auc'}, 'random': {...}}."""
    display.begin('synthetic data')
    ensure_data(args.data_root, display)
    import dinomamba_mm  # noqa: F401  (registers the project's modules)

    display.begin('DINO pretraining of DinoVim')
    dino_checkpoint = pretrain_dino(args, display)
    results: Dict[str, dict] = {'dino': {}, 'random': {}}
    probe_checkpoints = {}
    for key, checkpoint, title in (('dino', dino_checkpoint, 'linear probe, DINO teacher'),
                                   ('random', None, 'linear probe, random init')):
        display.begin(title)
        results[key]['top1'], probe_checkpoints[key] = linear_probe(args, display, key,
                                                                    checkpoint)
    for key, title in (('dino', 'Binary-AUC, DINO teacher'),
                       ('random', 'Binary-AUC, random init')):
        display.begin(title)
        results[key]['auc'] = binary_auc(args, display, key, probe_checkpoints[key])

    display.begin('plots')
    plots_dir = osp.join(args.work_dir, 'plots')
    os.makedirs(plots_dir, exist_ok=True)
    loss_plot = plot_loss(osp.join(args.work_dir, 'dino'), osp.join(plots_dir, 'dino_loss.png'))
    display.end(loss_plot or 'no DINO scalars found')
    return results


def main(argv: Optional[Sequence[str]] = None) -> dict:
    args = parse_args(argv)
    args.work_dir = osp.abspath(args.work_dir)
    os.makedirs(args.work_dir, exist_ok=True)
    warnings.filterwarnings('ignore')
    start = time.time()
    console_log = osp.join(args.work_dir, 'demo_console.log')
    with console_to(console_log) as stream:
        results = run_steps(args, Display(num_steps=7, stream=stream))
    runtime = time.time() - start

    summary = dict(results=results, seed=args.seed, quick=args.quick,
                   runtime_s=round(runtime, 1), work_dir=args.work_dir)
    with open(osp.join(args.work_dir, 'results.json'), 'w') as f:
        json.dump(summary, f, indent=2)
    table = format_table(results)
    with open(osp.join(args.work_dir, 'results.md'), 'w') as f:
        f.write(table + '\n')

    print()
    print(table)
    print()
    if args.quick:
        print('(--quick: a smoke test on a few images for one epoch; the numbers mean nothing)')
    print('chance: probe top-1 14.3 % (7 classes), Binary-AUC 0.5 (docs/demo.md: why the '
          "demo's Binary-AUC stays near it)")
    print(f'runtime {runtime / 60:.1f} min, seed {args.seed}')
    print(f'work dir: {args.work_dir}')
    print('  dino/             DINO logs and checkpoint (teacher = teacher.backbone.*)')
    print('  probe_dino/       linear probe of the DINO teacher: logs, checkpoint')
    print('  probe_random/     linear probe of the random init: logs, checkpoint')
    print('  binary_auc_*/     Binary-AUC tables (csv, md), ROC curve, map overlays')
    print('  plots/            DINO loss curve')
    print('  results.json, results.md: the table;  demo_console.log: console output of the runs')
    return summary


if __name__ == '__main__':
    main()
