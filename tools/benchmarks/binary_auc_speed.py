"""Time Binary-AUC (exact and binned) over many 512x512 maps; scikit-learn as the reference.

Maps are random 32x32 patch grids, smoothed and upsampled bilinearly to 512x512, masks are
thresholded blobs (both classes present). Three timings per batch of maps, side by side:
``binary_auc`` on the 512x512 maps in both modes, and the whole ``BinaryAUC`` metric
(``process``: upsampling the 32x32 map to the 512x512 label, merging the label, exact AUC) on
the same data. Maps are generated in batches, so memory stays bounded and only the AUC work is
timed. Prints the machine, the totals, and the ratios to scikit-learn's roc_auc_score (timed on
a subset, and checked equal to the exact mode).

Example::

    python tools/benchmarks/binary_auc_speed.py --num-maps 2000 --size 512
"""
import argparse
import os.path as osp
import sys

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from benchmark_utils import Timer, machine_line  # noqa: E402

from dinomamba_mm.evaluation import binary_auc  # noqa: E402
from dinomamba_mm.evaluation.metrics import BinaryAUC  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--num-maps', type=int, default=2000, help='maps timed (default 2000)')
    parser.add_argument('--size', type=int, default=512, help='map side in pixels')
    parser.add_argument('--batch', type=int, default=50, help='maps per call')
    parser.add_argument('--num-thresholds', type=int, default=1000,
                        help='bins of the binned mode (default 1000)')
    parser.add_argument('--sklearn-maps', type=int, default=20,
                        help='maps timed with sklearn (it is the slow reference)')
    parser.add_argument('--seed', type=int, default=0, help='seed of the maps (default 0)')
    parser.add_argument('--threads', type=int,
                        help='torch intra-op threads (default: torch\'s choice); on a shared, '
                        'loaded machine 1 avoids idle spinning in bilinear upsampling')
    return parser.parse_args()


def make_batch(num: int, size: int, generator: torch.Generator):
    """(num, size, size) float32 maps upsampled from (num, 32, 32) grids, bool masks, grids."""
    grid = torch.rand(num, 1, 32, 32, generator=generator)
    grid = F.avg_pool2d(grid, 5, stride=1, padding=2)
    maps = F.interpolate(grid, size=(size, size), mode='bilinear', align_corners=False)[:, 0]
    truth = F.interpolate(torch.rand(num, 1, 8, 8, generator=generator), size=(size, size),
                          mode='bilinear', align_corners=False)[:, 0]
    masks = (0.6 * truth + 0.4 * maps) > 0.5
    masks[:, 0, 0], masks[:, 0, 1] = True, False
    return maps.numpy(), masks.numpy(), grid[:, 0]


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f'machine: {machine_line()} | numpy {np.__version__}')
    generator = torch.Generator().manual_seed(args.seed)
    totals = {'exact': 0.0, 'binned': 0.0}
    cpu = {'exact': 0.0, 'binned': 0.0, 'metric': 0.0}
    metric = BinaryAUC(mode='exact')
    metric_time = 0.0
    done = 0
    max_diff = 0.0
    sklearn_time, sklearn_done = 0.0, 0
    while done < args.num_maps:
        num = min(args.batch, args.num_maps - done)
        maps, masks, grids = make_batch(num, args.size, generator)
        results = {}
        for mode in totals:
            with Timer() as timer:
                results[mode] = binary_auc(maps, masks, mode=mode,
                                           num_thresholds=args.num_thresholds)
            totals[mode] += timer.wall
            cpu[mode] += timer.cpu
        samples = [dict(pred_map=grids[i], gt_sem_seg=dict(data=torch.from_numpy(
            masks[i].astype(np.uint8))[None])) for i in range(num)]
        with Timer() as timer:
            metric.process(None, samples)
        metric_time += timer.wall
        cpu['metric'] += timer.cpu
        max_diff = max(max_diff, float(np.abs(results['exact'] - results['binned']).max()))
        if sklearn_done < args.sklearn_maps:
            take = min(num, args.sklearn_maps - sklearn_done)
            with Timer() as timer:
                reference = [roc_auc_score(masks[i].ravel(), maps[i].ravel())
                             for i in range(take)]
            sklearn_time += timer.wall
            sklearn_done += take
            exact_err = float(np.abs(results['exact'][:take] - reference).max())
            assert exact_err < 1e-9, f'exact mode differs from sklearn by {exact_err}'
        done += num
    per_map_sklearn = sklearn_time / max(sklearn_done, 1)
    print(f'{args.num_maps} maps of {args.size}x{args.size}, binned T={args.num_thresholds}')
    for mode, total in totals.items():
        per_map = total / args.num_maps
        print(f'  {mode:7s}: {total:7.2f} s total (CPU {cpu[mode]:6.2f} s), '
              f'{per_map * 1e3:7.2f} ms/map, '
              f'{per_map_sklearn / per_map:6.1f}x faster than sklearn roc_auc_score')
    print(f'  BinaryAUC metric (exact, 32x32 map -> 512x512 label): {metric_time:7.2f} s total '
          f'(CPU {cpu["metric"]:6.2f} s), '
          f'{metric_time / args.num_maps * 1e3:7.2f} ms/image '
          f'(mean AUC {metric.compute_metrics(metric.results)["mean"]:.4f})')
    print(f'  sklearn: {per_map_sklearn * 1e3:7.2f} ms/map (over {sklearn_done} maps), '
          f'projected {per_map_sklearn * args.num_maps:.1f} s for {args.num_maps} maps')
    print(f'  max |exact - binned| = {max_diff:.2e}')


if __name__ == '__main__':
    main()
