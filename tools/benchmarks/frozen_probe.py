"""Logistic-regression probe of frozen DINO teachers vs the random init, side by side.

The backbone and its features come from a linear-probe config (default: the demo's,
``dinomamba_mm.FrozenBackbone`` -> concatenated class tokens of the last blocks). Each
``checkpoint`` (a DINO checkpoint, its teacher loaded strictly) and ``random`` / ``random:N``
(the same backbone at random initialisation, seed 0 / N) is probed on an ImageNet-style
classification folder (``meta/train.txt``, ``meta/val.txt``): images resized to ``--size`` (bicubic), normalised
with the config's mean / std, features standardised on the train split, scikit-learn
``LogisticRegression`` for each C of ``--c``; the table gives val top-1 per C and the best.
It is the closed-form counterpart of the demo's SGD probe: no augmentation, no schedule, so
rows differ only by their backbone weights.

    python tools/benchmarks/frozen_probe.py random random:1 checkpoints/demo/dinovim.pth \\
        --data-root data/synthetic_demo/cls --size 32
    # another architecture: --cfg-options model.backbone.backbone.img_size=48
"""
import argparse
import logging
import os.path as osp
import sys
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from benchmark_utils import machine_line, table_header, table_row  # noqa: E402

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DEFAULT_CONFIG = osp.join(REPO, 'configs', 'demo', 'linear-probe_dinovim-demo_synthetic.py')


def load_split(root: str, split: str, size: int) -> Tuple[np.ndarray, np.ndarray]:
    """(N, size, size, 3) float32 RGB images and (N,) labels of ``root/meta/<split>.txt``."""
    from PIL import Image
    meta = osp.join(root, 'meta', f'{split}.txt')
    if not osp.isfile(meta):
        raise ValueError(f'--data-root {root!r} has no {meta}; expected an ImageNet-style '
                         f'folder with meta/train.txt and meta/val.txt')
    images, labels = [], []
    with open(meta) as f:
        for line in f.read().splitlines():
            if not line.strip():
                continue
            name, label = line.rsplit(' ', 1)
            image = Image.open(osp.join(root, split, name)).convert('RGB')
            images.append(np.asarray(image.resize((size, size), Image.BICUBIC), np.float32))
            labels.append(int(label))
    return np.stack(images), np.asarray(labels)


def random_init_seed(spec: str) -> Optional[int]:
    """Seed of a random-init spec: 'random' -> 0, 'random:N' -> N; None for a checkpoint."""
    if spec == 'random':
        return 0
    if spec.startswith('random:'):
        try:
            return int(spec[len('random:'):])
        except ValueError:
            raise ValueError(
                f"a random init is 'random' or 'random:<int seed>', got {spec!r}") from None
    return None


def build_backbone(cfg, checkpoint: str) -> torch.nn.Module:
    """The config's backbone with the teacher of ``checkpoint`` (seed 0 before loading), or
    at random init for 'random' / 'random:N' (seed 0 / N)."""
    from mmengine.logging import MMLogger
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    backbone_cfg = cfg.model.backbone.copy()
    seed = random_init_seed(checkpoint)
    backbone_cfg.checkpoint = checkpoint if seed is None else None
    torch.manual_seed(seed or 0)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(backbone_cfg)
    # init_weights reports every tensor at INFO level; the table is this tool's output
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        model.init_weights()
    finally:
        logger.setLevel(level)
    return model.eval()


@torch.no_grad()
def features(model: torch.nn.Module, images: np.ndarray, mean: Sequence[float],
             std: Sequence[float], batch: int = 200) -> np.ndarray:
    """(N, F): the backbone's outputs, each flattened, concatenated."""
    mean_t = torch.tensor(mean).view(1, 3, 1, 1)
    std_t = torch.tensor(std).view(1, 3, 1, 1)
    out = []
    for i in range(0, len(images), batch):
        x = (torch.from_numpy(images[i:i + batch]).permute(0, 3, 1, 2) - mean_t) / std_t
        out.append(torch.cat([f.flatten(1) for f in model(x)], 1).numpy())
    return np.concatenate(out)


def probe(train: Tuple[np.ndarray, np.ndarray], val: Tuple[np.ndarray, np.ndarray],
          cs: Sequence[float]) -> List[float]:
    """Val top-1 (%) of a logistic regression on standardised features, one per C."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler
    scaler = StandardScaler().fit(train[0])
    x_train, x_val = scaler.transform(train[0]), scaler.transform(val[0])
    return [100.0 * float(np.mean(
        LogisticRegression(C=c, max_iter=2000).fit(x_train, train[1]).predict(x_val) == val[1]))
        for c in cs]


def parse_args(argv=None) -> argparse.Namespace:
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('checkpoints', nargs='+',
                        help="DINO checkpoints and/or 'random' (the random init, seed 0) or "
                             "'random:N' (seed N)")
    parser.add_argument('--config', default=DEFAULT_CONFIG, help='linear-probe config')
    parser.add_argument('--data-root', required=True,
                        help='ImageNet-style folder: meta/{train,val}.txt, {train,val}/')
    parser.add_argument('--size', type=int, required=True, help='image side fed to the backbone')
    parser.add_argument('--c', type=float, nargs='+', default=[0.01, 0.1, 1.0],
                        help='inverse regularisation strengths to try')
    parser.add_argument('--threads', type=int, default=1, help='torch threads (default 1)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, default={},
                        help='overrides of the config, e.g. model.backbone.backbone.img_size=32')
    args = parser.parse_args(argv)
    if args.size < 8:
        parser.error(f'--size must be >= 8, got {args.size}')
    if any(c <= 0 for c in args.c):
        parser.error(f'--c values must be > 0, got {args.c}')
    for ckpt in args.checkpoints:
        try:
            seed = random_init_seed(ckpt)
        except ValueError as error:
            parser.error(str(error))
        if seed is None and not osp.isfile(ckpt):
            parser.error(f"checkpoint {ckpt!r} is not a file (nor 'random' / 'random:N')")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    sys.path.insert(0, REPO)
    import dinomamba_mm  # noqa: F401  registers the modules
    from mmengine.config import Config
    cfg = Config.fromfile(args.config)
    cfg.merge_from_dict(args.cfg_options)
    preprocessor = cfg.model.get('data_preprocessor') or cfg.data_preprocessor
    mean, std = preprocessor['mean'], preprocessor['std']
    train = load_split(args.data_root, 'train', args.size)
    val = load_split(args.data_root, 'val', args.size)
    print(f'# machine: {machine_line()}')
    print(f'# {args.config} {args.cfg_options or ""}; {args.data_root}: {len(train[1])} train / '
          f'{len(val[1])} val images at {args.size} px; one val image = '
          f'{100.0 / len(val[1]):.2f} %')
    print(table_header(['backbone'] + [f'C={c:g} top-1 (%)' for c in args.c] + ['best (%)']))
    for ckpt in args.checkpoints:
        model = build_backbone(cfg, ckpt)
        accs = probe((features(model, train[0], mean, std), train[1]),
                     (features(model, val[0], mean, std), val[1]), args.c)
        print(table_row([ckpt] + [f'{a:.1f}' for a in accs + [max(accs)]]), flush=True)


if __name__ == '__main__':
    main()
