"""The README demo: the paper's findings in miniature, on small models of synthetic scenes, on CPU.

Five frozen backbones of the same width on the demo's 64 px scenes (docs/demo.md, the design):
ViT, LinearViT and DinoVim pretrained with DINO, DinoVim trained with the labels, DinoVim at
random initialisation. Steps (every model built from the project's configs, every training by
the stock mmengine Runner):

1. data: ``data/synthetic_demo`` generated with ``tools/data/make_synthetic.py`` when missing;
2. token-mixing rank (``tools/analysis/token_mixing_rank.py``) of the three DINO models;
3. class-token maps and their Binary-AUC at every block (``tools/analysis/binary_auc.py``);
4. the features of every backbone, extracted once per scene (the class token and the patch
   tokens of the last block), for the heads below;
5. linear probes of the five backbones (``configs/demo/linear-probe_features-demo_synthetic.py``);
6. the dense miniature: a linear segmentation head on the three DINO backbones
   (``configs/demo/linear-seg_features-demo_synthetic.py``);
7. figures, the tables with the paper's figures beside them, and the paper's orderings with a
   verdict each.

The trained models are the checkpoints shipped in ``checkpoints/demo`` (seed 0; how they were
made: docs/demo.md), or those of ``--checkpoint-dir``; ``--pretrain`` trains them first with the
same configs and this run's seed. ``--summarize`` prints the tables and verdicts of several runs
(seeds) side by side.

Usage::

    python tools/demo.py [--work-dir work_dirs/demo] [--seed 0] [--quick] [--pretrain]
        [--checkpoint-dir DIR] [--background shared|varied]
    python tools/demo.py --summarize work_dirs/demo_seed0 work_dirs/demo_seed1 ...

``--quick`` is a smoke test: a small generated data set, short head schedules, a few scenes
(its numbers mean nothing).
"""
import argparse
import contextlib
import glob
import json
import os
import os.path as osp
import runpy
import sys
import time
import warnings
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
from tqdm import tqdm

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIG_DIR = osp.join(REPO, 'configs/demo')
PROBE_CONFIG = osp.join(CONFIG_DIR, 'linear-probe_features-demo_synthetic.py')
SEGMENTATION_CONFIG = osp.join(CONFIG_DIR, 'linear-seg_features-demo_synthetic.py')
SCENES_CONFIG = osp.join(CONFIG_DIR, 'synthetic-scenes_64px.py')
SHIPPED_DIR = osp.join(REPO, 'checkpoints/demo')
MAKE_SYNTHETIC = osp.join(REPO, 'tools/data/make_synthetic.py')
RANK_TOOL = osp.join(REPO, 'tools/analysis/token_mixing_rank.py')
BINARY_AUC_TOOL = osp.join(REPO, 'tools/analysis/binary_auc.py')
EXTRACT_TOOL = osp.join(REPO, 'tools/misc/extract_dino_teacher.py')


class DemoModel(NamedTuple):
    """A backbone of the demo: ``key`` (file names), ``label`` (tables), ``mixer`` (the token
    mixer), ``training`` ('dino', 'supervised' or 'random'), its ``config`` and, for the DINO
    models, the row of the rank tool (``rank_row``)."""
    key: str
    label: str
    mixer: str
    training: str
    config: str
    rank_row: Optional[str] = None


def _config(name: str) -> str:
    return osp.join(CONFIG_DIR, f'{name}-demo_synthetic.py')


DINOVIM = DemoModel('dinovim', 'DinoVim', 'Mamba-2 SSD', 'dino', _config('dino_dinovim'),
                    'combined')
VIT = DemoModel('vit', 'ViT', 'softmax attention', 'dino', _config('dino_vit'), 'softmax')
LINEARVIT = DemoModel('linearvit', 'LinearViT', 'linear attention', 'dino',
                      _config('dino_linearvit'), 'linear')
SUPERVISED = DemoModel('dinovim_supervised', 'DinoVim, supervised', 'Mamba-2 SSD', 'supervised',
                       _config('supervised_dinovim'))
RANDOM = DemoModel('dinovim_random', 'DinoVim, random init', 'Mamba-2 SSD', 'random',
                   _config('dino_dinovim'))
#: the DINO models in the paper's order (softmax > Mamba > linear)
DINO_MODELS = (VIT, DINOVIM, LINEARVIT)
#: the trained models (shipped or --pretrain) and every backbone the demo scores
TRAINED = (DINOVIM, VIT, LINEARVIT, SUPERVISED)
MODELS = (VIT, DINOVIM, LINEARVIT, SUPERVISED, RANDOM)

#: make_synthetic.py options of the demo's data (docs/demo.md, the design); --background picks
#: 'shared' (the design) or 'varied' (its ablation)
DEMO_STYLE = ['--layouts', 'cls', '--size', '64', '--background-contrast', '0.3', '--clutter',
              '0', '0', '--class-patterns', '--cls-objects', '1', '3', '--cls-radius', '0.14',
              '0.3']
DEMO_SIZES = dict(full=['--num-train', '4000', '--num-val', '2000'],
                  quick=['--num-train', '140', '--num-val', '70'])
#: scenes of the maps, of the rank analysis, shown in the figures (--quick: fewer), head epochs
FULL = dict(map_scenes=500, rank_scenes=4, shown_scenes=4, probe_epochs=None,
            segmentation_epochs=None)
QUICK = dict(map_scenes=8, rank_scenes=2, shown_scenes=2, probe_epochs=2,
             segmentation_epochs=2, dino_epochs=2, dino_images=64)
#: C of the rank analysis: 2 x 2 blocks of the 65 x 65 M, larger than N = D_QK = 16
RANK_BLOCK_SIZE = 32
#: the paper's figures (docs/paper.md section 5: the -B models, ImageNet-1k / ADE20K)
PAPER_TOP1 = dict(vit=78.2, dinovim=78.1, linearvit=74.7)
PAPER_MIOU = dict(vit=43.2, dinovim=38.0, linearvit=29.2)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--work-dir', default='work_dirs/demo',
                        help='where features, logs, figures and results go')
    parser.add_argument('--seed', type=int, default=0,
                        help='seed of the random init, the heads and --pretrain (the shipped '
                        'models are seed 0)')
    parser.add_argument('--quick', action='store_true',
                        help='smoke test on a small generated data set (numbers meaningless)')
    parser.add_argument('--pretrain', action='store_true',
                        help='train the four models first (long; docs/demo.md) instead of '
                        'using the checkpoints shipped in checkpoints/demo')
    parser.add_argument('--checkpoint-dir',
                        help='take the trained models from this folder (dinovim.pth, vit.pth, '
                        'linearvit.pth, dinovim_supervised.pth and their *_scalars.json), '
                        'e.g. those of another seed')
    parser.add_argument('--background', choices=('shared', 'varied'), default='shared',
                        help="the scenes' backgrounds: 'shared' (the design) or 'varied' (its "
                        'ablation: a background that identifies the image)')
    parser.add_argument('--data-root',
                        help='synthetic data root (<root>/cls), generated when missing '
                        '(default: data/synthetic_demo, with suffixes _quick and _varied)')
    parser.add_argument('--summarize', nargs='+', metavar='WORK_DIR',
                        help='print the tables and verdicts of these finished runs side by '
                        'side (their results.json) and run nothing else')
    args = parser.parse_args(argv)
    if args.pretrain and args.checkpoint_dir:
        parser.error('--pretrain trains the models; --checkpoint-dir takes them from a folder: '
                     'give one of them')
    if args.data_root is None:
        name = 'synthetic_demo' + ('_quick' if args.quick else '') + (
            '_varied' if args.background == 'varied' else '')
        args.data_root = osp.join(REPO, 'data', name)
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
            loss = float(outputs['loss'].detach()) if outputs and 'loss' in outputs else float('nan')
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
    bars, warnings, the analysis tools' tables) to ``path``; yields a stream on the original
    stdout."""
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


# ------------------------------------------------------------------------------ data, models
def ensure_data(args) -> Tuple[dict, str]:
    """Generate the demo's scenes under ``args.data_root`` (cls layout) when missing; a layout
    already there is used as it is. Returns the image counts and classes, and a summary line."""
    generator = runpy.run_path(MAKE_SYNTHETIC)  # the tool's functions, run in this process
    root = osp.join(args.data_root, 'cls')
    action = 'found'
    try:
        generator['check_layout'](root, 'cls')
    except FileNotFoundError:
        generator['main'](['--out', args.data_root, '--seed', '0', *DEMO_STYLE,
                           '--background', args.background,
                           *DEMO_SIZES['quick' if args.quick else 'full']])
        action = 'generated'
    counts = {}
    labels = set()
    for split in ('train', 'val'):
        with open(osp.join(root, 'meta', f'{split}.txt')) as f:
            lines = [line.split() for line in f if line.strip()]
        counts[split] = len(lines)
        labels.update(label for _, label in lines)
    counts['classes'] = len(labels)
    return counts, (f'{action} {args.data_root}: {counts["train"]} train / {counts["val"]} val '
                    f'scenes of 64 px, {counts["classes"]} classes, {args.background} '
                    'backgrounds')


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
    """Train ``model`` with its demo config (resuming the run in the work dir, if any); returns
    its backbone checkpoint and loss log."""
    from mmengine.config import Config
    cfg = Config.fromfile(model.config)
    cfg.work_dir = osp.join(args.work_dir, f'train_{model.key}')
    cfg.resume = True
    cfg.randomness = dict(seed=args.seed, deterministic=False)
    cfg.train_dataloader.dataset.data_root = osp.join(args.data_root, 'cls')
    if args.quick:
        set_epochs(cfg, QUICK['dino_epochs'])
        cfg.train_dataloader.dataset.indices = QUICK['dino_images']
        cfg.default_hooks.logger.interval = 1
    runner, hook = run(cfg, steps)
    checkpoint = osp.join(args.work_dir, 'checkpoints', f'{model.key}.pth')
    prefix = ['--prefix', 'backbone.'] if model.training == 'supervised' else []
    runpy.run_path(EXTRACT_TOOL)['main'](
        [osp.join(cfg.work_dir, f'epoch_{runner.max_epochs}.pth'), checkpoint, *prefix])
    losses = hook.losses or [float('nan')]
    steps.end(f'loss {losses[0]:.3f} -> {losses[-1]:.3f} in {len(hook.losses)} iterations, '
              f'backbone {checkpoint}')
    return dict(checkpoint=checkpoint, scalars=latest_scalars(cfg.work_dir))


def trained(model: DemoModel, folder: str) -> dict:
    """The checkpoint of ``model`` in ``folder`` (the shipped one by default) and the loss log
    of the run that made it."""
    checkpoint = osp.join(folder, f'{model.key}.pth')
    if not osp.isfile(checkpoint):
        raise FileNotFoundError(f'checkpoint {checkpoint} is missing; run the demo with '
                                '--pretrain to train the models, or give --checkpoint-dir')
    return dict(checkpoint=checkpoint, scalars=osp.join(folder, f'{model.key}_scalars.json'))


def latest_scalars(work_dir: str) -> Optional[str]:
    """The scalars.json of the latest run in an mmengine work dir (LocalVisBackend)."""
    found = sorted(glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json')))
    return found[-1] if found else None


def random_init(args) -> str:
    """Save DinoVim at its random initialisation (seed ``args.seed``) as a checkpoint, so that
    every step sees the same random network."""
    import torch
    from mmengine.config import Config
    from mmengine.runner.checkpoint import save_checkpoint

    from dinomamba_mm.analysis.backbone_loading import build_backbone
    from dinomamba_mm.engine.safeguards import AtomicLocalBackend  # noqa: F401 (atomic_local)
    torch.manual_seed(args.seed)
    backbone = build_backbone(Config.fromfile(RANDOM.config))
    backbone.init_weights()
    path = osp.join(args.work_dir, 'checkpoints', f'{RANDOM.key}_seed{args.seed}.pth')
    save_checkpoint(dict(meta=dict(seed=args.seed, source='random initialisation'),
                         state_dict={f'backbone.{k}': v for k, v in backbone.state_dict().items()}),
                    path, backend_args=dict(backend='atomic_local'))
    return path


def scenes_config(args):
    """configs/demo/synthetic-scenes_64px.py on ``args.data_root``."""
    from mmengine.config import Config
    cfg = Config.fromfile(SCENES_CONFIG)
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        cfg[loader].dataset.data_root = osp.join(args.data_root, 'cls')
    return cfg


def scene_files(args, split: str, count: int) -> List[Tuple[str, str]]:
    """(image, label map) of the first ``count`` scenes of ``split`` in the order of
    meta/<split>_seg.txt."""
    root = osp.join(args.data_root, 'cls')
    with open(osp.join(root, 'meta', f'{split}_seg.txt')) as f:
        stems = [line.strip() for line in f if line.strip()][:count]
    return [(osp.join(root, split, stem + '.JPEG'), osp.join(root, 'masks', split, stem + '.png'))
            for stem in stems]


# ------------------------------------------------------------------------------ analyses
def token_mixing_rank(args, checkpoints: Dict[str, str], settings: dict) -> dict:
    """Rank table of the three DINO models (all their blocks, val scenes at 64 px) and their
    spectra in one figure."""
    out_dir = osp.join(args.work_dir, 'rank')
    images = [image for image, _ in scene_files(args, 'val', settings['rank_scenes'])]
    rows = []
    for model in DINO_MODELS:  # one run each: the models have different numbers of blocks
        rows += runpy.run_path(RANK_TOOL)['main'](
            ['--out-dir', osp.join(out_dir, model.key), '--img-size', '64',
             '--block-size', str(RANK_BLOCK_SIZE),
             '--layers', *[str(i) for i in range(num_blocks(model))], '--images', *images,
             '--model', f'{model.key}={model.config}:{checkpoints[model.key]}'])
    ranks = {}
    for model in DINO_MODELS:
        row = next(r for r in rows if r['model'] == model.key and r['mixer'] == model.rank_row)
        ranks[model.key] = dict(rank=float(row['rank_all_blocks']), C=int(row['C']),
                                L=int(row['L']), rank_diag=float(row['rank_diag']),
                                rank_off=(float(row['rank_lower']) + float(row['rank_upper'])) / 2)
    spectra = plot_spectra(rows, osp.join(out_dir, 'spectra.png'))
    return dict(ranks=ranks, spectra=spectra)


def num_blocks(model: DemoModel) -> int:
    from mmengine.config import Config
    return Config.fromfile(model.config).model.backbone.arch['num_layers']


def plot_spectra(rows: List[dict], path: str) -> str:
    """The three models' mean normalised singular values of the diagonal and off-diagonal
    blocks of M, in one figure (the rank tool draws one per run)."""
    from dinomamba_mm.analysis.map_figures import pyplot
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, part in zip(axes, ('diagonal', 'off')):
        for model in DINO_MODELS:
            row = next(r for r in rows if r['model'] == model.key and r['mixer'] == model.rank_row)
            sigma = row['spectra'][part].reshape(-1, row['spectra'][part].shape[-1])
            sigma = sigma[sigma[:, 0] > 0]
            mean = (sigma / sigma[:, :1]).mean(axis=0)
            ax.semilogy(np.arange(1, mean.size + 1), np.maximum(mean, 1e-12),
                        label=f'{model.label} ({model.mixer})')
        ax.axhline(row['C'] * np.finfo(np.float32).eps, color='k', ls=':', lw=0.8,
                   label='rank tolerance C * eps')
        ax.axvline(16, color='grey', ls='--', lw=0.8, label='N = D_QK = 16')
        ax.set(title=f'{"off-diagonal" if part == "off" else "diagonal"} blocks of M '
                     f'({row["C"]} x {row["C"]})',
               xlabel='index i', ylabel='sigma_i / sigma_1 (mean over blocks)')
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def class_token_maps(args, model: DemoModel, checkpoint: str, settings: dict) -> List[float]:
    """Mean Binary-AUC of the class-token similarity map at every block over the first val
    scenes, in batches of the scenes' val loader (all 64 px; the tool also writes overlays of
    the last block and maps.npz to ``<work-dir>/maps/<key>``)."""
    batch_size = scenes_config(args).val_dataloader.batch_size
    blocks = num_blocks(model)
    argv = [model.config, '--checkpoint', checkpoint, '--data-config', SCENES_CONFIG,
            '--data-root', osp.join(args.data_root, 'cls'), '--map-type', 'similarity',
            '--layers', *[str(i) for i in range(blocks)],
            '--num-images', str(settings['map_scenes']), '--show', str(settings['shown_scenes']),
            '--batch-size', str(batch_size),
            '--out-dir', osp.join(args.work_dir, 'maps', model.key)]
    summary = runpy.run_path(BINARY_AUC_TOOL)['main'](argv)
    return [float(value) for value in summary['auc'][:, 0]]


def maps_by_block(args, checkpoints: Dict[str, str], aucs: Dict[str, List[float]]) -> str:
    """maps_by_block.png: for the first val scene of two classes, each model's class-token map
    at each block (the 4 attention blocks under DinoVim's blocks 2, 4, 6, 8: the same relative
    depth), with the scene's Binary-AUC."""
    import mmcv
    import torch
    import torch.nn.functional as F
    from mmengine.config import Config

    from dinomamba_mm.analysis import extract_class_token_maps
    from dinomamba_mm.analysis.backbone_loading import (IMAGENET_MEAN, IMAGENET_STD,
                                                        build_backbone)
    from dinomamba_mm.analysis.map_figures import draw_map, pyplot
    from dinomamba_mm.evaluation import binary_auc
    scenes = scene_files(args, 'val', 2)
    images = [mmcv.imread(image, channel_order='rgb') for image, _ in scenes]
    masks = [mmcv.imread(mask, flag='unchanged') > 0 for _, mask in scenes]
    inputs = torch.stack([torch.from_numpy(image).permute(2, 0, 1).float() for image in images])
    inputs = (inputs - torch.tensor(IMAGENET_MEAN).view(3, 1, 1)) / torch.tensor(
        IMAGENET_STD).view(3, 1, 1)
    columns = num_blocks(DINOVIM)
    plt = pyplot()
    fig, axes = plt.subplots(len(MODELS) * len(scenes), columns + 1,
                             figsize=(1.9 * (columns + 1), 1.75 * len(MODELS) * len(scenes)),
                             squeeze=False)
    for m, model in enumerate(MODELS):
        with contextlib.redirect_stdout(None):
            backbone = build_backbone(Config.fromfile(model.config), checkpoints[model.key])
        backbone.eval()
        blocks = num_blocks(model)
        maps = extract_class_token_maps(backbone, inputs, list(range(blocks))).maps[:, :, 0]
        maps = F.interpolate(maps, size=images[0].shape[:2], mode='bilinear',
                             align_corners=False).numpy()
        for s, image in enumerate(images):
            row = axes[m * len(scenes) + s]
            row[0].imshow(image)
            row[0].set_title(f'{model.label}', fontsize=7)
            for ax in row:
                ax.axis('off')
            for block in range(blocks):
                column = (block + 1) * columns // blocks
                draw_map(row[column], image, maps[s, block],
                         f'block {block}: AUC {binary_auc(maps[s, block], masks[s]):.2f} '
                         f'({aucs[model.key][block]:.2f})')
    fig.suptitle('class-token similarity map per model and block; per scene Binary-AUC (mean '
                 'over the val scenes in brackets)', fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    path = osp.join(args.work_dir, 'maps_by_block.png')
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def maps_side_by_side(args, aucs: Dict[str, List[float]]) -> str:
    """maps.png: the shown val scenes with each model's last-block map (maps.npz of the tool)."""
    import mmcv

    from dinomamba_mm.analysis.map_figures import save_maps_side_by_side
    columns, images, masks = [], None, None
    for model in MODELS:
        with np.load(osp.join(args.work_dir, 'maps', model.key, 'maps.npz')) as saved:
            if images is None:
                masks = list(saved['masks'])
                images = [mmcv.imread(str(p), channel_order='rgb') for p in saved['img_paths']]
            columns.append((model.label, list(saved['scores']), list(saved['aucs'])))
    path = osp.join(args.work_dir, 'maps.png')
    means = ', '.join(f'{m.label} {aucs[m.key][-1]:.3f}' for m in MODELS)
    save_maps_side_by_side(images, masks, columns, path,
                           title='class-token similarity map of the last block, 8 x 8 tokens '
                                 f'(mean Binary-AUC over the val scenes: {means})')
    return path


def extract_features(args, model: DemoModel, checkpoint: str) -> str:
    """The class token (N, C) and the patch tokens (N, h, w, C) of the last block (final-normed)
    of every train and val scene, with the scenes' classes and label maps, written with
    ``save_precomputed_features`` to ``<work-dir>/features/<key>/{train,val}_{cls,patches}.npz``
    (the probe and segmentation configs read them). Returns the folder."""
    import torch
    from mmengine.config import Config
    from mmengine.registry import DefaultScope
    from mmengine.runner import Runner

    from dinomamba_mm.analysis.backbone_loading import (IMAGENET_MEAN, IMAGENET_STD,
                                                        build_backbone)
    from dinomamba_mm.analysis.class_token_maps import raw_block_outputs
    from dinomamba_mm.analysis.token_layout import token_layout
    from dinomamba_mm.datasets import save_precomputed_features
    from dinomamba_mm.registry import MODELS as REGISTRY
    folder = osp.join(args.work_dir, 'features', model.key)
    os.makedirs(folder, exist_ok=True)
    backbone = build_backbone(Config.fromfile(model.config), checkpoint)
    backbone.eval()
    last = num_blocks(model) - 1
    scenes = scenes_config(args)
    with DefaultScope.overwrite_default_scope('mmseg'):
        preprocessor = REGISTRY.build(dict(
            type='mmseg.SegDataPreProcessor', mean=list(IMAGENET_MEAN), std=list(IMAGENET_STD),
            bgr_to_rgb=True))
        loaders = {split: Runner.build_dataloader(scenes[f'{split}_dataloader'])
                   for split in ('train', 'val')}
    for split, loader in loaders.items():
        tokens, patches, labels, seg_maps, paths = [], [], [], [], []
        with torch.no_grad(), raw_block_outputs(backbone, [last]):
            for batch in loader:
                data = preprocessor(batch, False)
                out = backbone(data['inputs'])[0]
                grid = tuple(s // backbone.patch_embed.projection.stride[0]
                             for s in data['inputs'].shape[-2:])
                layout = token_layout(backbone, grid)
                tokens.append(out[:, layout.read].mean(1).numpy())
                patches.append(out[:, layout.patches].reshape(len(out), *grid, -1).numpy())
                for sample in data['data_samples']:
                    seg_map = sample.gt_sem_seg.data[0].numpy().astype(np.uint8)
                    # every shape of a scene is of its class: label map id k is class k - 1
                    labels.append(int(seg_map.max()) - 1)
                    seg_maps.append(seg_map)
                    paths.append(sample.img_path)
        save_precomputed_features(osp.join(folder, f'{split}_cls.npz'), np.concatenate(tokens),
                                  labels=np.array(labels), img_paths=paths)
        save_precomputed_features(osp.join(folder, f'{split}_patches.npz'),
                                  np.concatenate(patches), seg_maps=np.stack(seg_maps),
                                  img_paths=paths)
    return folder


def train_head(args, steps: Steps, config: str, model: DemoModel, features: str, kind: str,
               epochs: Optional[int], cfg_options: Optional[dict] = None) -> float:
    """Train a head on ``features`` (``kind``: 'cls' for the probe, 'patches' for the
    segmentation head) with its config, changed by ``cfg_options`` (mmengine's
    ``merge_from_dict``; tools/benchmarks/demo_steps.py times variants); returns the val metric
    (top-1 %, mIoU %)."""
    from mmengine.config import Config
    cfg = Config.fromfile(config)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    cfg.work_dir = osp.join(args.work_dir, f'{"probe" if kind == "cls" else "segmentation"}_'
                            f'{model.key}')
    cfg.randomness = dict(seed=args.seed, deterministic=False)
    # mmengine shares a logger, message hub and visualizer by name: a head's are named after its
    # run (the Runner adds the time), not after the config and the second (two short heads of one
    # config) nor 'visualizer' (mmseg's runtime), which would log into an earlier head's folder
    cfg.experiment_name = osp.basename(cfg.work_dir)
    cfg.visualizer.pop('name', None)
    for loader, split in (('train_dataloader', 'train'), ('val_dataloader', 'val'),
                          ('test_dataloader', 'val')):
        cfg[loader].dataset.data_root = features
        cfg[loader].dataset.ann_file = f'{split}_{kind}.npz'
    if epochs is not None:
        set_epochs(cfg, epochs)
    _, hook = run(cfg, steps)
    return float(hook.metrics['accuracy/top1' if kind == 'cls' else 'mIoU'])


# ------------------------------------------------------------------------------ orderings
class Ordering(NamedTuple):
    """One of the paper's findings as an inequality on a run's results: ``check`` returns
    (holds, the values it compared)."""
    name: str
    paper: str
    check: Callable[[dict], Tuple[bool, str]]


def _greater(what: str, left: DemoModel, right: DemoModel, block: int = -1):
    def check(results: dict) -> Tuple[bool, str]:
        values = {'probe': results['top1'], 'mIoU': results.get('miou', {}),
                  'Binary-AUC': {k: v[block] for k, v in results['auc'].items()}}[what]
        a, b = values[left.key], values[right.key]
        digits = 3 if what == 'Binary-AUC' else 1
        return a > b, f'{a:.{digits}f} vs {b:.{digits}f}'
    return check


def _rank(results: dict) -> Tuple[bool, str]:
    values = [results['rank']['ranks'][m.key]['rank'] for m in DINO_MODELS]
    return values[0] > values[1] > values[2], ' > '.join(f'{v:.1f}' for v in values)


def _auc_first_block(results: dict) -> Tuple[bool, str]:
    first = results['auc'][DINOVIM.key][0]
    return first < 0.5, f'{first:.3f}'


def _auc_rises(results: dict) -> Tuple[bool, str]:
    first, last = results['auc'][DINOVIM.key][0], results['auc'][DINOVIM.key][-1]
    return last > first, f'{first:.3f} -> {last:.3f}'


def _auc_tracks_probe(results: dict) -> Tuple[bool, str]:
    by_probe = sorted(DINO_MODELS, key=lambda m: -results['top1'][m.key])
    by_auc = sorted(DINO_MODELS, key=lambda m: -results['auc'][m.key][-1])
    return by_probe == by_auc, (f'probe {" > ".join(m.label for m in by_probe)}; '
                                f'AUC {" > ".join(m.label for m in by_auc)}')


def _dense_lead(results: dict) -> Tuple[bool, str]:
    dense = results['miou'][DINOVIM.key] - results['miou'][LINEARVIT.key]
    probe = results['top1'][DINOVIM.key] - results['top1'][LINEARVIT.key]
    return dense > probe, f'{dense:+.1f} mIoU vs {probe:+.1f} top-1'


ORDERINGS = (
    Ordering('rank: softmax > Mamba > linear attention', 'structural', _rank),
    Ordering('probe: ViT > LinearViT', '78.2 > 74.7', _greater('probe', VIT, LINEARVIT)),
    Ordering('probe: DinoVim > LinearViT', '78.1 > 74.7', _greater('probe', DINOVIM, LINEARVIT)),
    Ordering('probe: ViT > DinoVim', '78.2 > 78.1', _greater('probe', VIT, DINOVIM)),
    Ordering('probe: DinoVim DINO > random init', 'DINO learns', _greater('probe', DINOVIM,
                                                                         RANDOM)),
    Ordering('AUC: DINO DinoVim > supervised DinoVim', 'DINO maps cleaner',
             _greater('Binary-AUC', DINOVIM, SUPERVISED)),
    Ordering('AUC: ViT > DinoVim', 'softmax > Mamba', _greater('Binary-AUC', VIT, DINOVIM)),
    Ordering('AUC: DinoVim > LinearViT', 'Mamba > linear',
             _greater('Binary-AUC', DINOVIM, LINEARVIT)),
    Ordering('AUC: ViT > LinearViT', 'softmax > linear', _greater('Binary-AUC', VIT, LINEARVIT)),
    Ordering('AUC of DinoVim < 0.5 at the first block', 'below 0.5 early', _auc_first_block),
    Ordering('AUC of DinoVim: last block > first block', 'rises with depth', _auc_rises),
    Ordering('AUC orders the DINO models as the probe', 'AUC tracks the probe',
             _auc_tracks_probe),
    Ordering('mIoU: ViT > DinoVim', '43.2 > 38.0', _greater('mIoU', VIT, DINOVIM)),
    Ordering('mIoU: DinoVim > LinearViT', '38.0 > 29.2', _greater('mIoU', DINOVIM, LINEARVIT)),
    Ordering('mIoU: ViT > LinearViT', '43.2 > 29.2', _greater('mIoU', VIT, LINEARVIT)),
    Ordering("DinoVim's lead over LinearViT: mIoU > probe", '+8.8 vs +3.4', _dense_lead),
)


def check_orderings(results: dict) -> List[dict]:
    """Each ordering of ``ORDERINGS`` on one run: name, paper, holds, values."""
    rows = []
    for ordering in ORDERINGS:
        holds, values = ordering.check(results)
        rows.append(dict(name=ordering.name, paper=ordering.paper, holds=bool(holds),
                         values=values))
    return rows


def verdict(held: Sequence[bool]) -> str:
    """'holds' when it holds at every seed, else 'does not hold', with the count."""
    count, total = sum(held), len(held)
    seeds = f'{count} of {total} seed{"s" if total > 1 else ""}'
    return f'holds ({seeds})' if count == total else f'does not hold ({seeds})'


# ------------------------------------------------------------------------------ figures
def plot_scores(results: dict, path: str) -> str:
    """scores.png: probe top-1, last-block Binary-AUC and mIoU per model, and the Binary-AUC
    by relative depth."""
    from dinomamba_mm.analysis.map_figures import pyplot
    plt = pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    colours = {m.key: f'C{i}' for i, m in enumerate(MODELS)}
    panels = (('linear probe top-1 (%)', results['top1'], MODELS),
              ('Binary-AUC, last block', {k: v[-1] for k, v in results['auc'].items()}, MODELS),
              ('mIoU (%), linear head', results['miou'], DINO_MODELS))
    for ax, (title, values, models) in zip(axes, panels):
        heights = [values[m.key] for m in models]
        bars = ax.bar(range(len(models)), heights, color=[colours[m.key] for m in models])
        ax.bar_label(bars, fmt='%.3f' if 'AUC' in title else '%.1f', fontsize=7)
        ax.set_xticks(range(len(models)), [m.label.replace(', ', '\n') for m in models],
                      fontsize=7)
        ax.set_title(title, fontsize=9)
        if 'AUC' in title:
            ax.axhline(0.5, color='k', ls=':', lw=0.8)
            ax.set_ylim(0, 1)
    ax = axes[-1]
    for model in MODELS:
        values = results['auc'][model.key]
        depth = [(i + 1) / len(values) for i in range(len(values))]
        ax.plot(depth, values, 'o-', color=colours[model.key], label=model.label, ms=3)
    ax.axhline(0.5, color='k', ls=':', lw=0.8)
    ax.set(xlabel='relative depth (block / blocks)', ylim=(0, 1),
           title='Binary-AUC by depth')
    ax.title.set_fontsize(9)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_losses(scalars: Dict[str, Optional[str]], out_path: str) -> str:
    """Training loss per iteration of each model's run (mmengine scalars.json); a curve needs
    two logged points at least."""
    curves = {}
    for label, path in scalars.items():
        if path and osp.isfile(path):
            with open(path) as f:
                records = [json.loads(line) for line in f if line.strip()]
            points = [(r['iter'], r['loss']) for r in records if 'loss' in r]
            if len(points) >= 2:
                curves[label] = points
    if not curves:
        return 'no loss curve: fewer than two logged losses per run'
    from dinomamba_mm.analysis.map_figures import pyplot
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for label, points in curves.items():
        ax.plot(*zip(*points), label=label)
    ax.set(xlabel='iteration', ylabel='training loss', title='pretraining on the demo scenes')
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return out_path


# --------------------------------------------------------------------------------- main
def run_steps(args, steps: Steps) -> dict:
    settings = QUICK if args.quick else FULL
    steps.begin('synthetic data')
    data, summary = ensure_data(args)
    steps.end(summary)
    import dinomamba_mm  # noqa: F401  (registers the project's modules)

    runs = {}
    for model in TRAINED:
        if args.pretrain:
            steps.begin(f'training of {model.label}' + (
                ' (DINO)' if model.training == 'dino' else ''))
            runs[model.key] = pretrain(args, steps, model)
        else:
            runs[model.key] = trained(model, args.checkpoint_dir or SHIPPED_DIR)
    checkpoints = {key: run_['checkpoint'] for key, run_ in runs.items()}
    checkpoints[RANDOM.key] = random_init(args)
    results: dict = dict(data=data, checkpoints=checkpoints, settings=dict(settings))

    steps.begin('token-mixing rank of the three DINO models')
    results['rank'] = token_mixing_rank(args, checkpoints, settings)
    ranks = results['rank']['ranks']
    steps.end(' > '.join(f'{m.mixer} ({m.label}) {ranks[m.key]["rank"]:.1f}'
                         for m in DINO_MODELS) + f'; figure {results["rank"]["spectra"]}')

    steps.begin('class-token maps and Binary-AUC at every block', total=len(MODELS))
    results['auc'] = {}
    for model in MODELS:
        results['auc'][model.key] = class_token_maps(args, model, checkpoints[model.key],
                                                     settings)
        steps.bar.set_postfix_str(f'{model.label} {results["auc"][model.key][-1]:.3f}',
                                  refresh=False)
        steps.bar.update()
    results['maps_figure'] = maps_side_by_side(args, results['auc'])
    results['maps_by_block_figure'] = maps_by_block(args, checkpoints, results['auc'])
    steps.end(f'figures {results["maps_figure"]}, {results["maps_by_block_figure"]}')

    steps.begin('features of the train and val scenes, extracted once', total=len(MODELS))
    features = {}
    for model in MODELS:
        features[model.key] = extract_features(args, model, checkpoints[model.key])
        steps.bar.update()
    steps.end(f'{osp.join(args.work_dir, "features")}')

    steps.begin('linear probes of the five backbones', total=len(MODELS))
    results['top1'] = {m.key: train_head(args, steps, PROBE_CONFIG, m, features[m.key], 'cls',
                                         settings['probe_epochs']) for m in MODELS}
    steps.end(', '.join(f'{m.label} {results["top1"][m.key]:.1f}%' for m in MODELS))

    steps.begin('linear segmentation heads on the three DINO backbones')
    results['miou'] = {m.key: train_head(args, steps, SEGMENTATION_CONFIG, m, features[m.key],
                                         'patches', settings['segmentation_epochs'])
                       for m in DINO_MODELS}
    steps.end(', '.join(f'{m.label} {results["miou"][m.key]:.1f}' for m in DINO_MODELS))

    steps.begin('figures')
    results['scores_figure'] = plot_scores(results, osp.join(args.work_dir, 'scores.png'))
    results['loss_figure'] = plot_losses({m.label: runs[m.key]['scalars'] for m in TRAINED},
                                         osp.join(args.work_dir, 'training_loss.png'))
    steps.end(f'{results["scores_figure"]}, {results["loss_figure"]}')
    results['orderings'] = check_orderings(results)
    return results


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
    return ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header),
            *['| ' + ' | '.join(row) + ' |' for row in rows]]


def _cell(values: Sequence[float], digits: int) -> str:
    """One value, or the mean and standard deviation of several (seeds) with each one."""
    if len(values) == 1:
        return f'{values[0]:.{digits}f}'
    each = ' / '.join(f'{v:.{digits}f}' for v in values)
    return f'{np.mean(values):.{digits}f} +- {np.std(values, ddof=1):.{digits}f} ({each})'


def format_tables(runs: Sequence[dict]) -> str:
    """The tables of one run, or of several runs (seeds) side by side, and the verdicts."""
    first = runs[0]
    ranks = [r['rank']['ranks'] for r in runs]
    some = ranks[0][DINOVIM.key]
    seeds = ', '.join(str(r['seed']) for r in runs)
    lines = [f'Seed{"s" if len(runs) > 1 else ""} {seeds}: {first["source"]}', '',
             f'1. Token-mixing rank of the three DINO models: all blocks, '
             f'{first["settings"]["rank_scenes"]} val scenes at 64 px, L = {some["L"]} '
             f'tokens, M cut into {some["C"]} x {some["C"]} blocks (N = D_QK = 16)', '']
    lines += _table(('model', 'token mixer', 'rank of a block of M (mean)', 'diagonal blocks',
                     'off-diagonal blocks', 'paper'),
                    [(m.label, m.mixer, _cell([r[m.key]['rank'] for r in ranks], 1),
                      _cell([r[m.key]['rank_diag'] for r in ranks], 1),
                      _cell([r[m.key]['rank_off'] for r in ranks], 1),
                      'softmax > Mamba > linear' if m is VIT else '')
                     for m in DINO_MODELS])
    data = first['data']
    lines += ['', f'2. Frozen backbones: linear probe (top-1 %, {data["val"]} val scenes, '
              f'{data["classes"]} classes), Binary-AUC of the last block\'s class-token map '
              f'({first["settings"]["map_scenes"]} val scenes), mIoU of a linear segmentation '
              f'head ({data["classes"] + 1} classes with the background)', '']
    lines += _table(('backbone', 'probe top-1', 'paper IN-1k top-1', 'Binary-AUC',
                     'mIoU', 'paper ADE20K mIoU'),
                    [(m.label, _cell([r['top1'][m.key] for r in runs], 1),
                      str(PAPER_TOP1.get(m.key, '')), _cell([r['auc'][m.key][-1] for r in runs], 3),
                      _cell([r['miou'][m.key] for r in runs], 1) if m.key in first['miou']
                      else '', str(PAPER_MIOU.get(m.key, '')))
                     for m in MODELS])
    blocks = len(first['auc'][DINOVIM.key])
    lines += ['', f'3. Binary-AUC of DinoVim (DINO) at every block (the paper: below 0.5 early, '
              'rising with depth); the other models at theirs', '']
    lines += _table(('block', *[m.label for m in MODELS]),
                    [(str(b), *[_cell([r['auc'][m.key][b * len(r['auc'][m.key]) // blocks]
                                       for r in runs], 3)
                                if (b + 1) * len(first['auc'][m.key]) % blocks == 0 else ''
                                for m in MODELS])
                     for b in range(blocks)])
    lines += ['', "(ViT and LinearViT have 4 blocks: each is shown beside DinoVim's block of the "
              'same relative depth)', '', "4. The paper's orderings", '']
    rows = []
    for i, ordering in enumerate(first['orderings']):
        held = [r['orderings'][i]['holds'] for r in runs]
        values = '; '.join(r['orderings'][i]['values'] for r in runs)
        rows.append((ordering['name'], ordering['paper'], values, verdict(held)))
    lines += _table(('ordering', 'paper', 'here', 'verdict'), rows)
    return '\n'.join(lines)


def closing_lines(results: dict, args, runtime: float) -> str:
    """What the tables were measured on, and where the pictures are (docs/demo.md explains each
    number and picture)."""
    data = results['data']
    w = args.work_dir
    return '\n'.join([
        f'data: {data["train"]} train / {data["val"]} val scenes ({args.background} '
        f'backgrounds), {data["classes"]} classes; Binary-AUC over the first '
        f'{results["settings"]["map_scenes"]} val scenes',
        'Pictures (what they show: docs/demo.md):',
        f'  {results["maps_figure"]}: the last block\'s class-token maps of the five models',
        f'  {results["maps_by_block_figure"]}: the maps per model and per block',
        f'  {results["rank"]["spectra"]}: the singular values of the blocks of M',
        f'  {results["scores_figure"]}: probe, Binary-AUC and mIoU per model, AUC by depth',
        f'  {results["loss_figure"]}: the training losses',
        f'Logs and numbers in {w} (demo_console.log, results.json, results.md)',
        f'runtime {runtime / 60:.1f} min, seed {args.seed}' + (
            '; --quick: a smoke test, the numbers mean nothing' if args.quick else '')])


def summarize(work_dirs: Sequence[str]) -> str:
    """The tables of finished runs (their results.json) side by side."""
    runs = []
    for work_dir in work_dirs:
        path = osp.join(work_dir, 'results.json')
        if not osp.isfile(path):
            raise FileNotFoundError(f'{path} not found: --summarize takes the work dirs of '
                                    'finished demo runs')
        with open(path) as f:
            runs.append(json.load(f))
    return format_tables(runs)


def main(argv: Optional[Sequence[str]] = None) -> dict:
    args = parse_args(argv)
    if args.summarize:
        table = summarize(args.summarize)
        print(table)
        return dict(table=table)
    args.work_dir = osp.abspath(args.work_dir)
    os.makedirs(args.work_dir, exist_ok=True)
    warnings.filterwarnings('ignore')
    start = time.time()
    num_steps = 7 + (len(TRAINED) if args.pretrain else 0)
    with console_to(osp.join(args.work_dir, 'demo_console.log')) as stream:
        results = run_steps(args, Steps(num_steps, stream))
    runtime = time.time() - start
    source = ('trained in this run (--pretrain)' if args.pretrain else
              f'the models of {osp.relpath(args.checkpoint_dir or SHIPPED_DIR, REPO)}')
    summary = dict(results, seed=args.seed, quick=args.quick, pretrain=args.pretrain,
                   background=args.background, source=source, runtime_s=round(runtime, 1),
                   work_dir=args.work_dir)
    table = format_tables([summary])
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
