"""Binary-AUC of a backbone's class-token maps on a segmentation dataset (paper section 2).

Builds ``model.backbone`` of CONFIG (weights from --checkpoint; random init without one), wraps
it in ``ClassTokenMapModel`` and runs it over the test split of a segmentation dataset config
(--data-config: ADE20K, Pascal VOC, ImageNet-S or the synthetic ADE-style set), scoring the maps
with the ``BinaryAUC`` metric. Writes to --out-dir:

- ``binary_auc.csv`` (one row per layer and map: mean, std, pooled AUC, counts) and
  ``binary_auc.md`` (layers x maps table, also printed);
- ``roc.png``: ROC curve of each layer, pixels pooled over the images and the layer's maps;
- ``overlay_XXX.png`` for the first --show images: image | the last block's map over the image,
  with a colour bar and the image's Binary-AUC | foreground mask
  (``dinomamba_mm.analysis.map_figures.save_maps_side_by_side`` with one model);
- ``maps.npz``: those images' paths, maps (at the label size), masks and Binary-AUCs, for
  figures that set several models side by side
  (``dinomamba_mm.analysis.map_figures.save_maps_side_by_side``).

Labels are read raw (the dataset's ``reduce_zero_label`` is switched off unless
--keep-reduce-zero-label), so the defaults --background-ids 0 --ignore-ids 255 hold for ADE20K
("other" = background), Pascal VOC and the synthetic set.

Example::

    python tools/analysis/binary_auc.py configs/demo/dino_dinovim-demo_synthetic.py \\
        --checkpoint checkpoints/demo/dinovim.pth \\
        --data-config configs/_base_/datasets/synthetic_ade.py \\
        --map-type attention --layers 0 2 3 --out-dir work_dirs/binary_auc
"""
import argparse
import csv
import os
import os.path as osp
from typing import List

import numpy as np
import torch
from mmengine.config import Config, DictAction
from mmengine.registry import DefaultScope
from mmengine.runner import Runner
from mmengine.utils import ProgressBar

import dinomamba_mm  # noqa: F401
from dinomamba_mm.analysis import ClassTokenMapModel
from dinomamba_mm.analysis.backbone_loading import (IMAGENET_MEAN, IMAGENET_STD,
                                                    backbone_config, build_backbone)
from dinomamba_mm.analysis.map_figures import (foreground_mask, pyplot,
                                               save_maps_side_by_side)
from dinomamba_mm.argument_checks import check_int_options
from dinomamba_mm.evaluation import roc_from_histograms
from dinomamba_mm.evaluation.metrics import BinaryAUC, label_map, maps_at_label_size


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('config', help='config whose model.backbone is analysed')
    parser.add_argument('--checkpoint', help='checkpoint; random initialisation without it')
    parser.add_argument('--checkpoint-prefix', default='auto',
                        help="backbone key prefix ('auto': teacher.backbone. then backbone.)")
    parser.add_argument('--data-config', help='config with test_dataloader (default: config)')
    parser.add_argument('--data-root', help="override the test dataset's data_root")
    parser.add_argument('--out-dir', required=True,
                        help='where the tables, roc.png and the overlays are written')
    parser.add_argument('--map-type', choices=['similarity', 'attention'],
                        default='similarity',
                        help="class-token map: cosine similarity of the class token's output "
                        "to the patch outputs, or the class token's row of the mixing matrix "
                        "(default: similarity)")
    parser.add_argument('--layers', type=int, nargs='+', default=[-1],
                        help='block indices (negative from the end)')
    parser.add_argument('--query', choices=['mean', 'each'], default='mean',
                        help='register models: average the registers or map each')
    parser.add_argument('--mamba-kinds', nargs='+', default=['combined'],
                        choices=['forward', 'backward', 'combined'],
                        help='Mamba attention maps: forward scan, backward scan and / or their '
                        'average (default: combined)')
    parser.add_argument('--mode', choices=['exact', 'binned'], default='exact',
                        help='AUC from sorted scores, or from histograms of --num-thresholds '
                        'bins (default: exact)')
    parser.add_argument('--num-thresholds', type=int, default=1000,
                        help='histogram bins of --mode binned (default 1000)')
    parser.add_argument('--background-ids', type=int, nargs='*', default=[0],
                        help='label ids that are background (negatives); every other id not '
                        'ignored is foreground (default: 0)')
    parser.add_argument('--ignore-ids', type=int, nargs='*', default=[255],
                        help='label ids left out of the AUC (default: 255)')
    parser.add_argument('--keep-reduce-zero-label', action='store_true',
                        help="keep the dataset's reduce_zero_label (then set the ids to match)")
    parser.add_argument('--num-images', type=int, help='first N images only')
    parser.add_argument('--show', type=int, default=4, help='overlays of the first K images')
    parser.add_argument('--batch-size', type=int, default=1,
                        help='images per forward pass; above 1 only for a dataset whose test '
                        'images are all of one size, as mmseg\'s data preprocessor requires '
                        '(default: 1)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override settings of CONFIG')
    args = parser.parse_args(argv)
    check_int_options(args, dict(num_images=1, show=0, batch_size=1))
    return args


def build_dataloader(data_cfg: Config, keep_reduce_zero_label: bool,
                     data_root: str = None, batch_size: int = 1):
    loader = dict(data_cfg.test_dataloader)
    loader.update(batch_size=batch_size, num_workers=0, persistent_workers=False)
    dataset = dict(loader['dataset'])
    if not keep_reduce_zero_label and 'reduce_zero_label' in dataset:
        dataset['reduce_zero_label'] = False
    if data_root:
        dataset['data_root'] = data_root
    loader['dataset'] = dataset
    with DefaultScope.overwrite_default_scope(data_cfg.get('default_scope', 'mmseg')):
        return Runner.build_dataloader(loader)


def check_one_size(images: List[torch.Tensor], batch_size: int) -> None:
    """mmseg's data preprocessor stacks a test batch only when its images have one size."""
    sizes = sorted({tuple(image.shape[-2:]) for image in images})
    if len(sizes) > 1:
        raise ValueError(f'--batch-size {batch_size}: a batch holds images of sizes {sizes}; '
                         'expected one size per batch (use --batch-size 1 for a dataset of '
                         'mixed sizes)')


def build_model(cfg: Config, args: argparse.Namespace) -> ClassTokenMapModel:
    backbone, _ = backbone_config(cfg)
    patch_size = backbone.get('patch_size', 16)
    preprocessor = cfg.model.get('data_preprocessor') or {}
    model = ClassTokenMapModel(
        backbone=build_backbone(cfg, args.checkpoint, args.checkpoint_prefix),
        map_type=args.map_type, layer_indices=args.layers, query=args.query,
        mamba_kinds=args.mamba_kinds,
        data_preprocessor=dict(
            type='mmseg.SegDataPreProcessor',
            mean=preprocessor.get('mean', list(IMAGENET_MEAN)),
            std=preprocessor.get('std', list(IMAGENET_STD)),
            bgr_to_rgb=preprocessor.get('to_rgb', preprocessor.get('bgr_to_rgb', True)),
            pad_val=0, seg_pad_val=255, test_cfg=dict(size_divisor=patch_size)))
    model.eval()
    return model


def write_tables(summary: dict, out_dir: str) -> str:
    names, layers = summary['names'], summary['layer_ids']
    per_image = summary['per_image']
    with open(osp.join(out_dir, 'binary_auc.csv'), 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(['layer', 'map', 'auc_mean', 'auc_std', 'pooled_auc', 'num_evaluated',
                         'num_skipped'])
        for row, layer in enumerate(layers):
            for col, name in enumerate(names):
                writer.writerow([layer, name, f'{summary["auc"][row, col]:.6f}',
                                 f'{per_image[:, row, col].std():.6f}',
                                 f'{summary["pooled_auc"][row, col]:.6f}',
                                 per_image.shape[0], summary['num_skipped']])
    header = '| layer | ' + ' | '.join(names) + (' | mean |' if len(names) > 1 else ' |')
    lines = [header, '|' + '---|' * (len(names) + 1 + (len(names) > 1))]
    for row, layer in enumerate(layers):
        cells = [f'{v:.4f}' for v in summary['auc'][row]]
        if len(names) > 1:
            cells.append(f'{summary["auc"][row].mean():.4f}')
        lines.append(f'| {layer} | ' + ' | '.join(cells) + ' |')
    lines.append('')
    lines.append(f'Mean Binary-AUC over {per_image.shape[0]} images '
                 f'({summary["num_skipped"]} of {summary["num_images"]} skipped: single-class '
                 'masks).')
    table = '\n'.join(lines) + '\n'
    with open(osp.join(out_dir, 'binary_auc.md'), 'w') as f:
        f.write(table)
    return table


def plot_roc(summary: dict, out_dir: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 5))
    for row, layer in enumerate(summary['layer_ids']):
        fg = summary['fg_hist'][row].sum(axis=0)
        bg = summary['bg_hist'][row].sum(axis=0)
        fpr, tpr = roc_from_histograms(fg, bg)
        ax.plot(fpr, tpr, label=f'layer {layer} (pooled AUC {np.trapezoid(tpr, fpr):.3f})')
    ax.plot([0, 1], [0, 1], 'k:', lw=0.8)
    ax.set(xlabel='FPR (background above threshold)', ylabel='TPR (foreground above threshold)',
           title='Binary-AUC ROC (pixels pooled over images and maps)', xlim=(0, 1), ylim=(0, 1))
    ax.legend(fontsize=7, loc='lower right')
    fig.tight_layout()
    fig.savefig(osp.join(out_dir, 'roc.png'), dpi=120)
    plt.close(fig)


def shown_sample(sample: dict, result: dict, metric: BinaryAUC) -> dict:
    """What the figures of one image need: the image, the mean of the last block's maps at the
    label size, the foreground mask and the image's Binary-AUC of that block (the mean of its
    maps' AUCs when it has several, e.g. one per head)."""
    import mmcv
    label = label_map(sample)
    last_layer = sample['pred_map'][-1]  # (K, h, w)
    score = maps_at_label_size(last_layer.mean(0)[None, None], label.shape, sample)[0]
    image = mmcv.imread(sample['img_path'], channel_order='rgb')
    layer, names = sample['map_layer_ids'][-1], sample['map_names']
    return dict(
        img_path=sample['img_path'], image=mmcv.imresize(image, (label.shape[1], label.shape[0])),
        score=score.astype(np.float32),
        mask=foreground_mask(label, metric.background_ids, metric.ignore_ids),
        auc=float(np.mean(result['auc'][-1])),
        what=f'layer {layer}: ' + (names[0] if len(names) == 1 else f'mean of {len(names)} maps'))


def save_shown(shown: List[dict], out_dir: str) -> None:
    """``maps.npz``: the shown images' paths, maps, masks and Binary-AUCs (the input of
    ``dinomamba_mm.analysis.map_figures.save_maps_side_by_side``)."""
    np.savez_compressed(osp.join(out_dir, 'maps.npz'),
                        img_paths=np.array([s['img_path'] for s in shown]),
                        scores=np.stack([s['score'] for s in shown]),
                        masks=np.stack([s['mask'] for s in shown]),
                        aucs=np.array([s['auc'] for s in shown]))


def main(argv: List[str] = None) -> dict:
    """Run the tool; returns ``BinaryAUC.summarize`` of the images (per-image and mean AUCs)."""
    args = parse_args(argv)
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    data_cfg = Config.fromfile(args.data_config) if args.data_config else cfg
    os.makedirs(args.out_dir, exist_ok=True)
    model = build_model(cfg, args)
    loader = build_dataloader(data_cfg, args.keep_reduce_zero_label, args.data_root,
                              args.batch_size)
    metric = BinaryAUC(mode=args.mode, num_thresholds=args.num_thresholds,
                       background_ids=args.background_ids, ignore_ids=args.ignore_ids,
                       pooled=True)
    total = len(loader.dataset) if args.num_images is None else min(args.num_images,
                                                                     len(loader.dataset))
    progress = ProgressBar(total)
    shown = []
    seen = 0
    with torch.no_grad():
        for batch in loader:
            if seen >= total:
                break
            check_one_size(batch['inputs'], args.batch_size)
            samples = [s.to_dict() for s in model.test_step(batch)][:total - seen]
            metric.process(batch, samples)
            for index, (sample, result) in enumerate(
                    zip(samples, metric.results[-len(samples):]), start=seen):
                if len(shown) < args.show and not result['skipped']:
                    shown.append(shown_sample(sample, result, metric))
                    save_maps_side_by_side([shown[-1]['image']], [shown[-1]['mask']],
                                           [(shown[-1]['what'], [shown[-1]['score']],
                                             [shown[-1]['auc']])],
                                           osp.join(args.out_dir, f'overlay_{index:03d}.png'))
                progress.update()
            seen += len(samples)
    print()
    summary = metric.summarize(metric.results)
    print(write_tables(summary, args.out_dir))
    plot_roc(summary, args.out_dir)
    if shown:
        save_shown(shown, args.out_dir)
    print(f'wrote binary_auc.csv, binary_auc.md, roc.png, {len(shown)} overlays'
          f'{" and maps.npz" if shown else ""} to {args.out_dir}')
    return summary


if __name__ == '__main__':
    main()
