"""The README demo: the paper's claims, shown on small DINO models of synthetic shapes on a CPU.

Steps (every model built from the project's configs, every training run by the stock mmengine
Runner):

1. data: ``data/synthetic_demo`` is generated with ``tools/data/make_synthetic.py`` when missing
   (``DEMO_DATA``: 4000 train / 2000 val classification images, 100 ADE-style val scenes);
2. token-mixing rank (``tools/analysis/token_mixing_rank.py``) of the three DINO models of the
   demo, DinoVim (Mamba-2 SSD), ViT (softmax attention) and LinearViT (linear attention), on
   ADE-style scenes at 128 px (257 tokens): the paper's rank hierarchy, with the singular values;
3. class-token maps and their Binary-AUC (``tools/analysis/binary_auc.py``) for the three models
   and for DinoVim at random initialisation, at 128 px (16 x 16 tokens), drawn side by side;
4. linear probes of the frozen DinoVim: its DINO teacher and its random initialisation;
5. figures and the closing table.

The DINO models are the checkpoints shipped in ``checkpoints/demo`` (how they were made:
docs/demo.md). ``--pretrain`` re-creates them first, with the same configs and this run's seed.

Usage::

    python tools/demo.py [--work-dir work_dirs/demo] [--seed 0] [--quick] [--pretrain]

``--quick`` is a smoke test: a small generated data set, one probe epoch, a few scenes (its numbers
mean nothing).
"""
import argparse
import contextlib
import json
import os
import os.path as osp
import runpy
import sys
import time
import warnings
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from tqdm import tqdm

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIG_DIR = osp.join(REPO, 'configs/demo')
PROBE_CONFIG = osp.join(CONFIG_DIR, 'linear-probe_dinovim-demo_synthetic.py')
MAPS_DATA_CONFIG = osp.join(CONFIG_DIR, 'synthetic-ade_binary-auc_128px.py')
SHIPPED_DIR = osp.join(REPO, 'checkpoints/demo')
MAKE_SYNTHETIC = osp.join(REPO, 'tools/data/make_synthetic.py')
RANK_TOOL = osp.join(REPO, 'tools/analysis/token_mixing_rank.py')
BINARY_AUC_TOOL = osp.join(REPO, 'tools/analysis/binary_auc.py')
EXTRACT_TOOL = osp.join(REPO, 'tools/misc/extract_dino_teacher.py')


class DemoModel(NamedTuple):
    """A DINO model of the demo: ``name`` (file names), ``label`` (tables), ``mixer`` (what
    mixes its tokens), ``rank_row`` (its row in the rank tool's table) and its DINO config."""
    name: str
    label: str
    mixer: str
    rank_row: str
    dino_config: str


MODELS = (
    DemoModel('dinovim', 'DinoVim', 'Mamba-2 SSD', 'combined',
              osp.join(CONFIG_DIR, 'dino_dinovim-demo_synthetic.py')),
    DemoModel('vit', 'ViT', 'softmax attention', 'softmax',
              osp.join(CONFIG_DIR, 'dino_vit-demo_synthetic.py')),
    DemoModel('linearvit', 'LinearViT', 'linear attention', 'linear',
              osp.join(CONFIG_DIR, 'dino_linearvit-demo_synthetic.py')),
)
RANDOM_KEY = 'dinovim_random'

#: make_synthetic.py options of each layout, for the full demo and --quick: calm backgrounds
#: and a pattern per shape class (docs/demo.md: why)
DEMO_STYLE = ['--background-contrast', '0.3', '--clutter', '0', '0', '--class-patterns']
DEMO_DATA = dict(
    full=dict(cls=['--num-train', '4000', '--num-val', '2000', '--size', '72', *DEMO_STYLE],
              ade=['--num-train', '1', '--num-val', '100', *DEMO_STYLE]),
    quick=dict(cls=['--num-train', '140', '--num-val', '70', '--size', '72', *DEMO_STYLE],
               ade=['--num-train', '1', '--num-val', '8', *DEMO_STYLE]))
#: --quick: probe epochs, DINO epochs of --pretrain (of 2 iterations each: 64 images, batch 32)
QUICK = dict(probe_epochs=1, dino_epochs=2, dino_images=64)
#: scenes and blocks of the rank analysis (the models' 4 blocks), scenes drawn side by side
RANK_IMAGES = 4
RANK_BLOCKS = 4
MAP_ROWS = 4


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--work-dir', default='work_dirs/demo',
                        help='where logs, checkpoints, figures and results go')
    parser.add_argument('--seed', type=int, default=0,
                        help='seed of the random init, the probes and --pretrain')
    parser.add_argument('--quick', action='store_true',
                        help='smoke test on a small generated data set (numbers meaningless)')
    parser.add_argument('--pretrain', action='store_true',
                        help='DINO-pretrain the three models first (long; docs/demo.md) instead '
                             'of using the checkpoints shipped in checkpoints/demo')
    parser.add_argument('--data-root',
                        help='synthetic data root: <root>/cls and <root>/ade, generated when '
                             'missing (default: data/synthetic_demo, data/synthetic_demo_quick '
                             'with --quick)')
    args = parser.parse_args(argv)
    if args.data_root is None:
        args.data_root = osp.join(REPO, 'data', 'synthetic_demo_quick' if args.quick
                                  else 'synthetic_demo')
    return args


# ------------------------------------------------------------------------------ display
class Steps:
    """The demo's numbered steps on the console: a tqdm bar while a step runs (on a terminal),
    then one line with its summary and duration."""

    def __init__(self, num_steps: int, stream=sys.stdout) -> None:
        self.num_steps = num_steps
        self.stream = stream
        self.step = 0
        self.bar = None

    def begin(self, title: str, total: Optional[int] = None) -> None:
        self.step += 1
        self.title = title
        self.start = time.time()
        self.bar = tqdm(total=total, desc=f'[{self.step}/{self.num_steps}] {title}',
                        file=self.stream, leave=False, disable=None, dynamic_ncols=True)

    def end(self, summary: str) -> None:
        self.bar.close()
        self.stream.write(f'[{self.step}/{self.num_steps}] {self.title}: {summary} '
                          f'({time.time() - self.start:.0f}s)\n')
        self.stream.flush()


def progress_hook(steps: Steps):
    """An mmengine hook that advances the step's bar per training iteration (with the epoch and
    the loss) and keeps the losses and the final validation metrics."""
    from mmengine.hooks import Hook

    class DemoProgressHook(Hook):
        priority = 'VERY_LOW'

        def __init__(self) -> None:
            self.metrics: Dict[str, float] = {}
            self.losses: List[float] = []

        def before_train(self, runner) -> None:
            steps.bar.reset(total=runner.max_iters)

        def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
            loss = float(outputs['loss']) if outputs and 'loss' in outputs else float('nan')
            self.losses.append(loss)
            steps.bar.set_postfix_str(
                f'epoch {runner.epoch + 1}/{runner.max_epochs} loss {loss:.3f}', refresh=False)
            steps.bar.update()

        def after_val_epoch(self, runner, metrics=None) -> None:
            self.metrics.update(metrics or {})

    return DemoProgressHook()


@contextlib.contextmanager
def console_to(path: str):
    """Send everything written to file descriptors 1 and 2 (mmengine's console log, progress
    bars, warnings, data workers, the analysis tools' tables) to ``path``; yields a stream on
    the original stdout."""
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


# --------------------------------------------------------------------------------- steps
def ensure_data(args) -> Tuple[dict, str]:
    """Generate the layouts the demo reads (cls, ade) under ``args.data_root`` when missing,
    with the options of ``DEMO_DATA``; layouts already there are used as they are. Returns the
    image counts and classes, and a summary line."""
    generator = runpy.run_path(MAKE_SYNTHETIC)  # the tool's functions, run in this process
    options = DEMO_DATA['quick' if args.quick else 'full']
    missing = []
    for kind in ('cls', 'ade'):
        try:
            generator['check_layout'](osp.join(args.data_root, kind), kind)
        except FileNotFoundError:
            missing.append(kind)
    for kind in missing:
        generator['main'](['--out', args.data_root, '--seed', '0', '--layouts', kind,
                          *options[kind]])
    counts = {}
    labels = set()
    for split in ('train', 'val'):
        with open(osp.join(args.data_root, 'cls', 'meta', f'{split}.txt')) as f:
            lines = [line.split() for line in f if line.strip()]
        counts[split] = len(lines)
        labels.update(label for _, label in lines)
    counts['classes'] = len(labels)
    scenes = len(os.listdir(osp.join(args.data_root, 'ade', 'images', 'validation')))
    action = f'generated {", ".join(missing)} under' if missing else 'found'
    return counts, (f'{action} {args.data_root}: {counts["train"]} train / {counts["val"]} val '
                    f'classification images, {scenes} val scenes')


def set_epochs(cfg, epochs: int) -> None:
    """Shorten a config to ``epochs``: its schedule (warm-up kept, at most an epoch less),
    checkpoint and validation intervals."""
    schedule = []
    for scheduler in cfg.param_scheduler:
        scheduler = dict(scheduler)
        if scheduler['type'] == 'LinearLR':
            scheduler['end'] = min(scheduler['end'], epochs - 1)
            if scheduler['end'] <= 0:
                continue
        else:
            begin = schedule[-1]['end'] if schedule else 0
            scheduler.update(begin=begin, end=epochs, T_max=epochs - begin)
        schedule.append(scheduler)
    cfg.param_scheduler = schedule
    cfg.train_cfg.max_epochs = epochs
    if 'val_interval' in cfg.train_cfg:
        cfg.train_cfg.val_interval = epochs
    cfg.default_hooks.checkpoint.interval = epochs


def run(cfg, steps: Steps):
    """Train ``cfg`` with the stock Runner (its console output goes to the demo's log)."""
    from mmengine.runner import Runner
    runner = Runner.from_cfg(cfg)
    hook = progress_hook(steps)
    runner.register_hook(hook)
    runner.train()
    return runner, hook


def pretrain(args, steps: Steps, model: DemoModel) -> dict:
    """DINO-pretrain ``model`` with its demo config; returns its teacher checkpoint and log."""
    from mmengine.config import Config
    cfg = Config.fromfile(model.dino_config)
    cfg.work_dir = osp.join(args.work_dir, f'dino_{model.name}')
    cfg.randomness = dict(seed=args.seed, deterministic=False)
    cfg.train_dataloader.dataset.data_root = osp.join(args.data_root, 'cls')
    if args.quick:
        set_epochs(cfg, QUICK['dino_epochs'])
        cfg.train_dataloader.dataset.indices = QUICK['dino_images']
        cfg.default_hooks.logger.interval = 1
    runner, hook = run(cfg, steps)
    teacher = osp.join(args.work_dir, 'checkpoints', f'{model.name}.pth')
    runpy.run_path(EXTRACT_TOOL)['main'](
        [osp.join(cfg.work_dir, f'epoch_{runner.max_epochs}.pth'), teacher])
    steps.end(f'DINO loss {hook.losses[0]:.3f} -> {hook.losses[-1]:.3f} in '
              f'{len(hook.losses)} iterations, teacher {teacher}')
    return dict(checkpoint=teacher, scalars=latest_scalars(cfg.work_dir))


def shipped(model: DemoModel) -> dict:
    """The shipped teacher checkpoint of ``model`` and the loss log of the run that made it."""
    checkpoint = osp.join(SHIPPED_DIR, f'{model.name}.pth')
    if not osp.isfile(checkpoint):
        raise FileNotFoundError(f'shipped checkpoint {checkpoint} is missing; run the demo with '
                                '--pretrain to make the DINO models')
    return dict(checkpoint=checkpoint,
                scalars=osp.join(SHIPPED_DIR, f'{model.name}_scalars.json'))


def latest_scalars(work_dir: str) -> Optional[str]:
    """The scalars.json of the latest run in an mmengine work dir (LocalVisBackend)."""
    import glob
    found = sorted(glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json')))
    return found[-1] if found else None


def random_init(args) -> str:
    """Save DinoVim at its random initialisation (seed ``args.seed``) as a checkpoint, so that
    the probe and the maps see the same random network."""
    import torch
    from mmengine.config import Config
    from mmengine.runner.checkpoint import save_checkpoint
    from dinomamba_mm.analysis.backbone_loading import build_backbone
    from dinomamba_mm.engine.safeguards import AtomicLocalBackend  # noqa: F401 (atomic_local)
    torch.manual_seed(args.seed)
    backbone = build_backbone(Config.fromfile(MODELS[0].dino_config))
    backbone.init_weights()
    path = osp.join(args.work_dir, 'checkpoints', f'{RANDOM_KEY}_seed{args.seed}.pth')
    save_checkpoint(dict(meta=dict(seed=args.seed, source='random initialisation'),
                         state_dict={f'backbone.{k}': v for k, v in backbone.state_dict().items()}),
                    path, backend_args=dict(backend='atomic_local'))
    return path


def scene_paths(data_root: str, count: int) -> List[str]:
    folder = osp.join(data_root, 'ade', 'images', 'validation')
    return [osp.join(folder, name) for name in sorted(os.listdir(folder))[:count]]


def token_mixing_rank(args, checkpoints: Dict[str, str]) -> dict:
    """Rank table of the three models (all blocks, ADE-style scenes at 128 px)."""
    out_dir = osp.join(args.work_dir, 'rank')
    argv = ['--out-dir', out_dir, '--img-size', '128', '--layers',
            *[str(block) for block in range(RANK_BLOCKS)],
            '--images', *scene_paths(args.data_root, RANK_IMAGES)]
    for model in MODELS:
        argv += ['--model', f'{model.name}={model.dino_config}:{checkpoints[model.name]}']
    rows = runpy.run_path(RANK_TOOL)['main'](argv)
    ranks = {}
    for model in MODELS:
        row = next(r for r in rows if r['model'] == model.name and r['mixer'] == model.rank_row)
        ranks[model.name] = dict(rank=float(row['rank_all_blocks']), C=int(row['C']),
                                 L=int(row['L']), rank_diag=float(row['rank_diag']),
                                 rank_off=(float(row['rank_lower']) + float(row['rank_upper'])) / 2)
    values = [ranks[m.name]['rank'] for m in (MODELS[1], MODELS[0], MODELS[2])]
    return dict(ranks=ranks, holds=values[0] > values[1] > values[2], num_blocks=RANK_BLOCKS,
                spectra=osp.join(out_dir, 'spectra.png'),
                table=osp.join(out_dir, 'token_mixing_rank.md'))


def class_token_maps(args, key: str, config: str, checkpoint: str) -> Tuple[float, int]:
    """Mean Binary-AUC of the last block's class-token similarity map at 128 px and the number
    of scenes it averages (the tool also writes overlays and maps.npz to
    ``<work-dir>/maps/<key>``)."""
    argv = [config, '--checkpoint', checkpoint, '--data-config', MAPS_DATA_CONFIG,
            '--data-root', osp.join(args.data_root, 'ade'), '--map-type', 'similarity',
            '--layers', '-1', '--show', str(MAP_ROWS),
            '--out-dir', osp.join(args.work_dir, 'maps', key)]
    summary = runpy.run_path(BINARY_AUC_TOOL)['main'](argv)
    return float(summary['auc'][0, 0]), len(summary['per_image'])


def linear_probe(args, steps: Steps, key: str, checkpoint: str) -> Tuple[float, int]:
    """Linear-probe the frozen DinoVim of ``checkpoint``; returns val top-1 (%) and epochs."""
    from mmengine.config import Config
    cfg = Config.fromfile(PROBE_CONFIG)
    cfg.work_dir = osp.join(args.work_dir, f'probe_{key}')
    cfg.randomness = dict(seed=args.seed, deterministic=False)
    cfg.model.backbone.checkpoint = checkpoint
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        cfg[loader].dataset.data_root = osp.join(args.data_root, 'cls')
    if args.quick:
        set_epochs(cfg, QUICK['probe_epochs'])
    runner, hook = run(cfg, steps)
    return hook.metrics['accuracy/top1'], runner.max_epochs


def side_by_side(args, labels: Dict[str, str], aucs: Dict[str, float]) -> str:
    """maps.png: the scenes of maps.npz with each model's map (dinomamba_mm.analysis)."""
    import mmcv
    import numpy as np
    from dinomamba_mm.analysis.map_figures import save_maps_side_by_side
    columns, images, masks = [], None, None
    for key, label in labels.items():
        with np.load(osp.join(args.work_dir, 'maps', key, 'maps.npz')) as saved:
            if images is None:
                masks = list(saved['masks'])
                images = [mmcv.imresize(mmcv.imread(str(p), channel_order='rgb'),
                                        masks[0].shape[::-1]) for p in saved['img_paths']]
            columns.append((label, list(saved['scores']), list(saved['aucs'])))
    path = osp.join(args.work_dir, 'maps.png')
    means = ', '.join(f'{label} {aucs[key]:.3f}' for key, label in labels.items())
    save_maps_side_by_side(images, masks, columns, path,
                           title='class-token similarity map of the last block, 16 x 16 tokens '
                                 f'(mean Binary-AUC over the val scenes: {means})')
    return path


def plot_losses(scalars: Dict[str, Optional[str]], out_path: str) -> str:
    """DINO loss per iteration of each model's run (mmengine scalars.json); a curve needs two
    logged points at least."""
    curves = {}
    for label, path in scalars.items():
        if path and osp.isfile(path):
            with open(path) as f:
                records = [json.loads(line) for line in f if line.strip()]
            points = [(r['iter'], r['loss']) for r in records if 'loss' in r]
            if len(points) >= 2:
                curves[label] = points
    if not curves:
        return 'no DINO loss curve: fewer than two logged losses per run'
    from dinomamba_mm.analysis.map_figures import pyplot
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for label, points in curves.items():
        ax.plot(*zip(*points), label=label)
    ax.set(xlabel='iteration', ylabel='DINO loss', title='DINO pretraining on synthetic shapes')
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return out_path


# --------------------------------------------------------------------------------- main
def run_steps(args, steps: Steps) -> dict:
    steps.begin('synthetic data')
    data, summary = ensure_data(args)
    steps.end(summary)
    import dinomamba_mm  # noqa: F401  (registers the project's modules)

    runs = {}
    for model in MODELS:
        if args.pretrain:
            steps.begin(f'DINO pretraining of {model.label}')
            runs[model.name] = pretrain(args, steps, model)
        else:
            runs[model.name] = shipped(model)
    checkpoints = {name: run_['checkpoint'] for name, run_ in runs.items()}
    checkpoints[RANDOM_KEY] = random_init(args)
    results: dict = dict(data=data, checkpoints=checkpoints)

    steps.begin('token-mixing rank of the three DINO models')
    results['rank'] = token_mixing_rank(args, checkpoints)
    ranks = results['rank']['ranks']
    steps.end(' > '.join(f'{m.mixer} ({m.label}) {ranks[m.name]["rank"]:.1f}'
                         for m in (MODELS[1], MODELS[0], MODELS[2]))
              + f': {"holds" if results["rank"]["holds"] else "DOES NOT HOLD"}')

    labels = {m.name: f'{m.label} (DINO)' for m in MODELS}
    labels[RANDOM_KEY] = f'{MODELS[0].label} (random init)'
    configs = {m.name: m.dino_config for m in MODELS}
    configs[RANDOM_KEY] = MODELS[0].dino_config
    steps.begin('class-token maps and Binary-AUC', total=len(labels))
    results['auc'] = {}
    for key in labels:
        results['auc'][key], results['auc_images'] = class_token_maps(
            args, key, configs[key], checkpoints[key])
        steps.bar.set_postfix_str(f'{labels[key]} {results["auc"][key]:.3f}', refresh=False)
        steps.bar.update()
    results['maps_figure'] = side_by_side(args, labels, results['auc'])
    steps.end(f'figure {results["maps_figure"]}')

    results['top1'] = {}
    for key, title in ((MODELS[0].name, f'linear probe of the {MODELS[0].label} DINO teacher'),
                       (RANDOM_KEY, f'linear probe of {MODELS[0].label} at random init')):
        steps.begin(title)
        results['top1'][key], results['probe_epochs'] = linear_probe(args, steps, key,
                                                                     checkpoints[key])
        steps.end(f'top-1 {results["top1"][key]:.1f}%')

    steps.begin('DINO loss curves')
    results['loss_figure'] = plot_losses(
        {m.label: runs[m.name]['scalars'] for m in MODELS},
        osp.join(args.work_dir, 'dino_loss.png'))
    steps.end(results['loss_figure'])
    return results


def mixer_sizes() -> Dict[str, int]:
    """D_QK of the attention models and the state size N of DinoVim, from their configs."""
    from mmengine.config import Config
    vit = Config.fromfile(MODELS[1].dino_config).model.backbone.arch
    dinovim = Config.fromfile(MODELS[0].dino_config).model.backbone.arch
    return dict(head_dims=vit['embed_dims'] // vit['num_heads'], d_state=dinovim['d_state'])


def format_tables(results: dict, args) -> str:
    """The two tables of the closing report (also results.md)."""
    ranks, auc, top1 = results['rank']['ranks'], results['auc'], results['top1']
    sizes = mixer_sizes()
    first = ranks[MODELS[0].name]
    source = ('DINO-pretrained in this run (--pretrain)' if args.pretrain
              else f'shipped in {osp.relpath(SHIPPED_DIR, REPO)}')
    order = (MODELS[1], MODELS[0], MODELS[2])
    lines = [
        f'1. Token-mixing rank of the three DINO models ({source}): all '
        f'{results["rank"]["num_blocks"]} blocks, {RANK_IMAGES} val scenes at 128 px, '
        f'L = {first["L"]} tokens, M cut into {first["C"]} x {first["C"]} blocks',
        '',
        '| model | token mixer | rank of a block of M (mean) | diagonal blocks | '
        'off-diagonal blocks |',
        '|---|---|---|---|---|']
    for model in order:
        r = ranks[model.name]
        lines.append(f'| {model.label} | {model.mixer} | {r["rank"]:.1f} | {r["rank_diag"]:.1f} '
                     f'| {r["rank_off"]:.1f} |')
    lines += ['', ' > '.join(m.mixer for m in order) + ': '
              + ('holds' if results['rank']['holds'] else 'DOES NOT HOLD')
              + f' (the bounds are structural, they hold for any weights: linear attention '
              f'has rank <= D_QK = {sizes["head_dims"]} everywhere, Mamba <= N = '
              f'{sizes["d_state"]} off the diagonal; softmax attention has no bound below C)', '',
              '2. Frozen features: linear probe and class-token maps', '',
              '| backbone (frozen) | probe top-1 (%) | Binary-AUC of the class-token map |',
              '|---|---|---|']
    rows = [(f'{MODELS[0].label}, DINO', MODELS[0].name),
            (f'{MODELS[0].label}, random init (seed {args.seed})', RANDOM_KEY)]
    rows += [(f'{m.label}, DINO', m.name) for m in MODELS[1:]]
    for label, key in rows:
        probe = f'{top1[key]:.1f}' if key in top1 else 'not probed'
        lines.append(f'| {label} | {probe} | {auc[key]:.3f} |')
    lines += ['', f'{MODELS[0].label}, DINO teacher - random init: '
              f'{top1[MODELS[0].name] - top1[RANDOM_KEY]:+.1f} points of probe top-1, '
              f'{auc[MODELS[0].name] - auc[RANDOM_KEY]:+.3f} of Binary-AUC']
    return '\n'.join(lines)


def closing_lines(results: dict, args, runtime: float) -> str:
    """What the tables were measured on, and where the pictures are (docs/demo.md explains each
    number and picture)."""
    data = results['data']
    return '\n'.join([
        f'probe: {data["train"]} train / {data["val"]} val images of {data["classes"]} shape '
        f'classes (chance {100 / data["classes"]:.1f} %), {results["probe_epochs"]} epochs; '
        f'Binary-AUC: mean over {results["auc_images"]} val scenes at 128 px',
        f'Pictures and logs in {args.work_dir} (maps.png, maps/<model>/, rank/spectra.png, '
        'dino_loss.png, demo_console.log, results.json / results.md); what they show: '
        'docs/demo.md',
        f'runtime {runtime / 60:.1f} min, seed {args.seed}' + (
            '; --quick: a smoke test, the numbers mean nothing' if args.quick else '')])


def main(argv: Optional[Sequence[str]] = None) -> dict:
    args = parse_args(argv)
    args.work_dir = osp.abspath(args.work_dir)
    os.makedirs(args.work_dir, exist_ok=True)
    warnings.filterwarnings('ignore')
    start = time.time()
    num_steps = 6 + (len(MODELS) if args.pretrain else 0)
    with console_to(osp.join(args.work_dir, 'demo_console.log')) as stream:
        results = run_steps(args, Steps(num_steps, stream))
    runtime = time.time() - start

    table = format_tables(results, args)
    summary = dict(results, seed=args.seed, quick=args.quick, pretrain=args.pretrain,
                   runtime_s=round(runtime, 1), work_dir=args.work_dir)
    with open(osp.join(args.work_dir, 'results.json'), 'w') as f:
        json.dump(summary, f, indent=2)
    with open(osp.join(args.work_dir, 'results.md'), 'w') as f:
        f.write(table + '\n')
    print()
    print(table)
    print()
    print(closing_lines(results, args, runtime))
    return summary


if __name__ == '__main__':
    main()
