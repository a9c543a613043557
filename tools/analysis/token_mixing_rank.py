"""Rank of the token-mixing matrices M of softmax attention, linear attention and Mamba-2.

For each model, materialises M (Y = M X) of every head in chosen blocks for some images (each
block's token mixer gives its own through ``mixing_matrix``, called by
``dinomamba_mm.analysis.mixer_mixing_matrices``: softmax(QK^T/sqrt(d)), phi(Q) phi(K)^T, and
the SSD matrices of the forward / backward scans and their average), cuts it into C x C blocks
and reports the numerical rank (torch.linalg.matrix_rank's sigma > sigma_max * C * eps(float32):
numpy's default tolerance at float32 precision) and the effective rank (Roy & Vetterli: exp of the entropy of the
normalised singular values) of the diagonal and off-diagonal (lower / upper) blocks and of the
whole L x L matrix. Expected (docs/paper.md section 1): off-diagonal blocks full (C) for softmax,
<= N (state size) per direction for Mamba, <= D_QK for linear attention, whose whole M has rank
<= D_QK, while Mamba's diagonal blocks are full; so over all blocks Softmax > Mamba > Linear,
which is the order the tool checks. With N = D_QK (the paper's 64 / 64) the off-diagonal blocks
alone put Mamba and linear attention at the same bound; on random tiny models Mamba's measured
off-diagonal ranks fall slightly below it (e.g. 15.6 vs 16 at N = D_QK = 16).

Without --model, three randomly initialised models of one size are compared: ViT, LinearViT and
DinoVim with N = D_QK (head dims), as in the paper (64 = 64). --model NAME=CONFIG[:CHECKPOINT]
(repeatable) analyses the backbone of a config (e.g. a trained demo model) instead.

Writes token_mixing_rank.md / .csv (also printed) and spectra.png (mean normalised singular
values of diagonal and off-diagonal blocks) to --out-dir.

Example::

    python tools/analysis/token_mixing_rank.py --out-dir work_dirs/rank
    python tools/analysis/token_mixing_rank.py --out-dir work_dirs/rank_demo \\
        --model dinovim=configs/demo/dino_dinovim-demo_synthetic.py:checkpoints/demo/dinovim.pth
"""
import argparse
import csv
import os
import os.path as osp
from collections import OrderedDict
from typing import Dict, List

import numpy as np
import torch
from mmengine.config import Config

import dinomamba_mm  # noqa: F401
from dinomamba_mm.analysis import (block_ranks, capture_mixer_inputs, default_block_size,
                                   effective_rank, find_mixer, mixer_mixing_matrices,
                                   numerical_rank)
from dinomamba_mm.analysis.backbone_loading import IMAGENET_MEAN, IMAGENET_STD, build_backbone
from dinomamba_mm.analysis.map_figures import pyplot
from dinomamba_mm.analysis.mixing_matrix import normalize_layer_indices
from dinomamba_mm.argument_checks import check_int_options
from dinomamba_mm.registry import MODELS

COLUMNS = ('model', 'mixer', 'L', 'C', 'rank_whole', 'rank_diag', 'rank_lower', 'rank_upper',
           'rank_all_blocks', 'erank_diag', 'erank_off')


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--out-dir', required=True,
                        help='where token_mixing_rank.md / .csv and spectra.png are written')
    parser.add_argument('--model', action='append', default=[],
                        metavar='NAME=CONFIG[:CHECKPOINT]',
                        help='a config backbone to analyse (repeatable); default: random '
                        'ViT / LinearViT / DinoVim built from the size options below')
    parser.add_argument('--checkpoint-prefix', default='auto',
                        help="backbone key prefix in the --model checkpoints ('auto': "
                        "teacher.backbone. then backbone.)")
    parser.add_argument('--img-size', type=int, default=128,
                        help='image side of the random models and the inputs (default 128)')
    parser.add_argument('--patch-size', type=int, default=8,
                        help='patch side of the random models (default 8)')
    parser.add_argument('--embed-dims', type=int, default=64,
                        help='width of the random models (default 64)')
    parser.add_argument('--num-heads', type=int, default=4,
                        help='attention heads; D_QK = embed_dims / num_heads')
    parser.add_argument('--depth', type=int, default=2,
                        help='blocks of the random models (default 2)')
    parser.add_argument('--d-state', type=int,
                        help='Mamba state size N (default: D_QK, as in the paper)')
    parser.add_argument('--images', nargs='*', default=[],
                        help='image files (default: --num-images Gaussian noise images)')
    parser.add_argument('--num-images', type=int, default=1,
                        help='noise images when --images is not given (default 1)')
    parser.add_argument('--layers', type=int, nargs='+', default=[-1],
                        help='blocks analysed, negative from the end (default: the last)')
    parser.add_argument('--block-size', type=int,
                        help='C (default: 256 for L >= 1024, else L // 4)')
    parser.add_argument('--seed', type=int, default=0,
                        help='seed of the random models and noise images (default 0)')
    args = parser.parse_args(argv)
    check_int_options(args, dict(img_size=1, patch_size=1, embed_dims=1, num_heads=1, depth=1,
                                 d_state=1, num_images=1, block_size=1))
    return args


def random_backbones(args: argparse.Namespace) -> Dict[str, torch.nn.Module]:
    if args.embed_dims % args.num_heads:
        raise ValueError(f'--embed-dims {args.embed_dims} must be a multiple of --num-heads '
                         f'{args.num_heads}')
    head_dims = args.embed_dims // args.num_heads
    vit_arch = dict(embed_dims=args.embed_dims, num_layers=args.depth,
                    num_heads=args.num_heads, feedforward_channels=4 * args.embed_dims)
    common = dict(img_size=args.img_size, patch_size=args.patch_size)
    configs = OrderedDict(
        vit=dict(type='mmpretrain.VisionTransformer', arch=vit_arch, **common),
        linear_vit=dict(type='dinomamba_mm.LinearViT', arch=vit_arch, **common),
        dinovim=dict(type='dinomamba_mm.DinoVim', drop_path_rate=0., **common,
                     arch=dict(embed_dims=args.embed_dims, num_layers=args.depth,
                               headdim=head_dims, d_state=args.d_state or head_dims)))
    backbones = OrderedDict()
    for name, cfg in configs.items():
        torch.manual_seed(args.seed)
        backbones[name] = MODELS.build(cfg)
    return backbones


def config_backbones(specs: List[str], prefix: str) -> Dict[str, torch.nn.Module]:
    backbones = OrderedDict()
    for spec in specs:
        if '=' not in spec:
            raise ValueError(f'--model must look like NAME=CONFIG[:CHECKPOINT], got {spec!r}')
        name, rest = spec.split('=', 1)
        config, _, checkpoint = rest.partition(':')
        backbones[name] = build_backbone(Config.fromfile(config), checkpoint, prefix,
                                         f'{name}: ')
    return backbones


def load_images(args: argparse.Namespace) -> torch.Tensor:
    """(B, 3, S, S) normalised images: files resized to S, else seeded Gaussian noise."""
    if not args.images:
        generator = torch.Generator().manual_seed(args.seed)
        return torch.randn(args.num_images, 3, args.img_size, args.img_size,
                           generator=generator)
    import mmcv
    batch = []
    for path in args.images:
        image = mmcv.imresize(mmcv.imread(path, channel_order='rgb'),
                              (args.img_size, args.img_size))
        batch.append(torch.from_numpy(image).permute(2, 0, 1).float())
    return (torch.stack(batch) - torch.tensor(IMAGENET_MEAN).view(3, 1, 1)) / \
        torch.tensor(IMAGENET_STD).view(3, 1, 1)


def analyse(name: str, backbone: torch.nn.Module, images: torch.Tensor, layers: List[int],
            block_size: int) -> List[dict]:
    """One row per mixer kind, ranks averaged over images, heads, layers and blocks."""
    backbone.eval()
    layer_ids = normalize_layer_indices(layers, len(backbone.layers))
    with torch.no_grad(), capture_mixer_inputs(backbone, layer_ids) as captured:
        backbone(images)
    per_kind: Dict[str, List] = OrderedDict()
    for layer in layer_ids:
        matrices = mixer_mixing_matrices(find_mixer(backbone.layers[layer]), captured[layer])
        for kind, matrix in matrices.items():
            per_kind.setdefault(kind, []).append(matrix)
    rows = []
    for kind, matrices in per_kind.items():
        matrix = torch.cat(matrices, dim=1)  # (B, layers * H, L, L)
        length = matrix.shape[-1]
        size = block_size or default_block_size(length)
        blocks = block_ranks(matrix, size)
        whole = numerical_rank(matrix)
        off = np.concatenate([blocks['lower']['singular_values'],
                              blocks['upper']['singular_values']], axis=-2)
        all_ranks = np.concatenate([blocks[k]['numerical_rank'] for k in blocks], axis=-1)
        rows.append(dict(
            model=name, mixer=kind, L=length, C=size, rank_whole=whole.mean(),
            rank_diag=blocks['diagonal']['numerical_rank'].mean(),
            rank_lower=blocks['lower']['numerical_rank'].mean(),
            rank_upper=blocks['upper']['numerical_rank'].mean(),
            rank_all_blocks=all_ranks.mean(),
            erank_diag=blocks['diagonal']['effective_rank'].mean(),
            erank_off=effective_rank(off).mean(),
            spectra=dict(diagonal=blocks['diagonal']['singular_values'], off=off)))
    return rows


def hierarchy(rows: List[dict]) -> List[str]:
    """Softmax > Mamba > Linear on the mean numerical rank over all blocks, where all three
    mixers were analysed (Mamba: the combined matrix)."""
    best = {}
    for row in rows:
        family = {'softmax': 'softmax', 'linear': 'linear', 'combined': 'mamba'}.get(
            row['mixer'])
        if family:
            best.setdefault(family, []).append(row)
    if set(best) != {'softmax', 'mamba', 'linear'}:
        return ['hierarchy: needs softmax, Mamba and linear mixers among the models']
    lines = []
    for s in best['softmax']:
        for m in best['mamba']:
            for li in best['linear']:
                values = [r['rank_all_blocks'] for r in (s, m, li)]
                holds = values[0] > values[1] > values[2]
                lines.append(
                    f'hierarchy (mean numerical rank of all {s["C"]}x{s["C"]} blocks): '
                    f'softmax {s["model"]} {values[0]:.1f} > Mamba {m["model"]} (combined) '
                    f'{values[1]:.1f} > linear {li["model"]} {values[2]:.1f}: '
                    f'{"holds" if holds else "DOES NOT HOLD"}')
    return lines


def write_tables(rows: List[dict], notes: List[str], out_dir: str) -> str:
    cells = [[f'{float(row[c]):.2f}' if isinstance(row[c], (np.floating, float)) else
              str(row[c]) for c in COLUMNS] for row in rows]
    with open(osp.join(out_dir, 'token_mixing_rank.csv'), 'w', newline='') as f:
        csv.writer(f).writerows([COLUMNS, *cells])
    lines = ['| ' + ' | '.join(COLUMNS) + ' |', '|' + '---|' * len(COLUMNS)]
    lines += ['| ' + ' | '.join(row) + ' |' for row in cells]
    lines += ['', 'rank_*: numerical rank, sigma > sigma_max * C * eps(float32) '
              '(rank_whole: of the L x L matrix, tolerance with L); erank_*: effective rank '
              '(Roy & Vetterli); means over images, heads, layers and blocks.', ''] + notes
    table = '\n'.join(lines) + '\n'
    with open(osp.join(out_dir, 'token_mixing_rank.md'), 'w') as f:
        f.write(table)
    return table


def plot_spectra(rows: List[dict], out_dir: str) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, part in zip(axes, ('diagonal', 'off')):
        for row in rows:
            sigma = row['spectra'][part].reshape(-1, row['spectra'][part].shape[-1])
            sigma = sigma[sigma[:, 0] > 0]
            if not len(sigma):
                continue
            mean = (sigma / sigma[:, :1]).mean(axis=0)
            ax.semilogy(np.arange(1, mean.size + 1), np.maximum(mean, 1e-12),
                        label=f'{row["model"]} {row["mixer"]}')
        ax.axhline(row['C'] * np.finfo(np.float32).eps, color='k', ls=':', lw=0.8,
                   label='rank tolerance C*eps')
        ax.set(title=f'{part}-diagonal blocks' if part == 'off' else 'diagonal blocks',
               xlabel='index i', ylabel='sigma_i / sigma_1 (mean over blocks)')
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(osp.join(out_dir, 'spectra.png'), dpi=120)
    plt.close(fig)


def main(argv: List[str] = None) -> List[dict]:
    args = parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    backbones = (config_backbones(args.model, args.checkpoint_prefix) if args.model
                 else random_backbones(args))
    images = load_images(args)
    rows = []
    for name, backbone in backbones.items():
        rows += analyse(name, backbone, images, args.layers, args.block_size)
    notes = hierarchy(rows)
    print(write_tables(rows, notes, args.out_dir))
    plot_spectra(rows, args.out_dir)
    print(f'wrote token_mixing_rank.md, token_mixing_rank.csv and spectra.png to '
          f'{args.out_dir}')
    return rows


if __name__ == '__main__':
    main()
