"""Time three steps of ``make demo`` as they were and as they are, side by side, on CPU.

    python tools/benchmarks/demo_steps.py [--rounds 2] [--scenes 100] [--probe-epochs 100]
        [--seg-epochs 10] [--steps maps probe segmentation] [--quick]
        [--work-dir work_dirs/benchmark_demo_steps]

On DinoVim's shipped checkpoint (``checkpoints/demo/dinovim.pth``) and the demo's data
(``data/synthetic_demo``, generated when missing; the features extracted once as tools/demo.py
does), each step in two variants, through the demo's own functions (so it needs what the demo
needs: the ``demo`` extra):

- **maps**: class-token maps and Binary-AUC at every block (tools/analysis/binary_auc.py) over
  the first ``--scenes`` val scenes, one scene per forward pass (``--batch-size 1``: before)
  and in the scenes' val batches (now); their AUCs must agree to 1e-4 (float32 sums in
  another order can flip near-ties);
- **probe**: the linear probe (configs/demo/linear-probe_features-demo_synthetic.py) packing
  every sample again at every serving (``pack_once=False``: before) and once (now); their top-1
  must be equal;
- **segmentation**: the linear segmentation head
  (configs/demo/linear-seg_features-demo_synthetic.py) as mmseg's ``FCNHead(num_convs=0)``
  packing every serving (before), and as configured (``LinearSegHead``, ``pack_once``). The two
  heads draw their initial weights differently, so their mIoU differs a little.

Every round runs each pair, alternating which variant goes first. Prints the machine line, the
median wall and process CPU seconds of each variant over the rounds, before / now, and the
results of both variants.
"""
import argparse
import os
import os.path as osp
import runpy
import statistics
import sys
from typing import Callable, Dict, List, Tuple

import numpy as np

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from benchmark_utils import Timer, machine_line, table_header, table_row  # noqa: E402

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DEMO = osp.join(REPO, 'tools', 'demo.py')
#: the segmentation head before LinearSegHead: mmseg's FCNHead reduced to a 1 x 1 convolution
FCN_HEAD = dict(_delete_=True, type='FCNHead', in_channels=96, channels=96, num_convs=0,
                concat_input=False, dropout_ratio=0., num_classes=8, norm_cfg=None,
                align_corners=False,
                loss_decode=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0))
PACK_EVERY_SERVING = {f'{loader}.dataset.pack_once': False
                      for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader')}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rounds', type=int, default=2, help='runs of each variant (median)')
    parser.add_argument('--scenes', type=int, default=100, help='val scenes of the maps')
    parser.add_argument('--probe-epochs', type=int, default=100,
                        help="the probe's epochs (default 100, the demo's)")
    parser.add_argument('--seg-epochs', type=int, default=10,
                        help="the segmentation head's epochs (the demo's: 40)")
    parser.add_argument('--steps', nargs='+', default=['maps', 'probe', 'segmentation'],
                        choices=['maps', 'probe', 'segmentation'], help='steps timed')
    parser.add_argument('--quick', action='store_true',
                        help="the demo's --quick data (140 / 70 scenes): a smoke test whose "
                        'times mean little')
    parser.add_argument('--data-root', help="the demo's data, generated when missing (default "
                        'data/synthetic_demo, with --quick data/synthetic_demo_quick)')
    parser.add_argument('--work-dir', default=osp.join(REPO, 'work_dirs', 'benchmark_demo_steps'),
                        help='features, heads, maps and the console log (default '
                        'work_dirs/benchmark_demo_steps)')
    args = parser.parse_args(argv)
    for name in ('rounds', 'scenes', 'probe_epochs', 'seg_epochs'):
        if getattr(args, name) < 1:
            parser.error(f'--{name.replace("_", "-")} must be >= 1, got {getattr(args, name)}')
    if args.data_root is None:
        args.data_root = osp.join(REPO, 'data',
                                  'synthetic_demo' + ('_quick' if args.quick else ''))
    args.seed, args.background = 0, 'shared'
    return args


def variants(args, demo: dict, steps) -> Tuple[Dict[str, Dict[str, Callable[[], float]]],
                                               Dict[int, np.ndarray]]:
    """``{step: {'before': run, 'now': run}}`` and ``{batch size: AUC per block}``, which the
    maps' runs fill; each run returns its result (the mean AUC of the last block, top-1 %,
    mIoU %)."""
    model = demo['DINOVIM']
    checkpoint = osp.join(demo['SHIPPED_DIR'], f'{model.key}.pth')
    features = osp.join(args.work_dir, 'features', model.key)
    batch_size = demo['scenes_config'](args).val_dataloader.batch_size
    blocks = demo['num_blocks'](model)
    aucs: Dict[int, np.ndarray] = {}

    def maps(batch: int) -> Callable[[], float]:
        def run() -> float:
            summary = runpy.run_path(demo['BINARY_AUC_TOOL'])['main']([
                model.config, '--checkpoint', checkpoint, '--data-config',
                demo['SCENES_CONFIG'], '--data-root', osp.join(args.data_root, 'cls'),
                '--map-type', 'similarity', '--layers', *[str(i) for i in range(blocks)],
                '--num-images', str(args.scenes), '--show', '0', '--batch-size', str(batch),
                '--out-dir', osp.join(args.work_dir, f'maps_batch{batch}')])
            aucs[batch] = np.asarray(summary['auc'][:, 0], dtype=float)
            return float(aucs[batch][-1])
        return run

    def head(config: str, kind: str, epochs: int, options: dict) -> Callable[[], float]:
        def run() -> float:
            steps.begin(kind)
            return demo['train_head'](args, steps, config, model, features, kind, epochs,
                                      cfg_options=dict(options))
        return run

    table = dict(
        maps=dict(before=maps(1), now=maps(batch_size)),
        probe=dict(before=head(demo['PROBE_CONFIG'], 'cls', args.probe_epochs,
                               PACK_EVERY_SERVING),
                   now=head(demo['PROBE_CONFIG'], 'cls', args.probe_epochs, {})),
        segmentation=dict(
            before=head(demo['SEGMENTATION_CONFIG'], 'patches', args.seg_epochs,
                        dict(PACK_EVERY_SERVING, **{'model.decode_head': FCN_HEAD})),
            now=head(demo['SEGMENTATION_CONFIG'], 'patches', args.seg_epochs, {})))
    return {step: table[step] for step in args.steps}, aucs


def main(argv=None) -> List[dict]:
    args = parse_args(argv)
    os.makedirs(args.work_dir, exist_ok=True)
    demo = runpy.run_path(DEMO)
    log = osp.join(args.work_dir, 'benchmark_console.log')
    rows = []
    with demo['console_to'](log) as display, open(os.devnull, 'w') as no_progress:
        print(machine_line(), file=display, flush=True)
        _, summary = demo['ensure_data'](args)
        import dinomamba_mm  # noqa: F401  (registers the project's modules)
        steps = demo['Steps'](0, stream=no_progress)
        model = demo['DINOVIM']
        demo['extract_features'](args, model, osp.join(demo['SHIPPED_DIR'], f'{model.key}.pth'))
        print(f'{summary}; DinoVim features in {args.work_dir}/features; console log {log}',
              file=display, flush=True)
        pairs, aucs = variants(args, demo, steps)
        for step, pair in pairs.items():
            times = {name: [] for name in ('before', 'now')}
            results = {}
            for round_ in range(args.rounds):
                for name in (('before', 'now') if round_ % 2 == 0 else ('now', 'before')):
                    with Timer() as timer:
                        results[name] = pair[name]()
                    times[name].append((timer.wall, timer.cpu))
                    print(f'{step} {name} round {round_ + 1}: {timer.wall:.1f} s wall, '
                          f'{timer.cpu:.1f} s CPU, result {results[name]:.4f}', file=display,
                          flush=True)
            row = dict(step=step, results=results)
            for name, measured in times.items():
                row[name] = (statistics.median(w for w, _ in measured),
                             statistics.median(c for _, c in measured))
            if step == 'maps':
                before, now = (aucs[batch] for batch in sorted(aucs))
                row['max_auc_difference'] = float(np.abs(before - now).max())
                if row['max_auc_difference'] > 1e-4:
                    raise AssertionError(f'the batched maps change the AUCs by '
                                         f'{row["max_auc_difference"]:.2e} > 1e-4')
            elif step == 'probe' and results['before'] != results['now']:
                raise AssertionError(f'pack_once changes the probe: top-1 {results["before"]} '
                                     f'before, {results["now"]} now')
            rows.append(row)
        lines = [table_header(['step', 'before: wall / CPU s', 'now: wall / CPU s',
                               'before / now (wall)', 'result before / now'])]
        for row in rows:
            lines.append(table_row([
                row['step'], '{:.1f} / {:.1f}'.format(*row['before']),
                '{:.1f} / {:.1f}'.format(*row['now']),
                f'{row["before"][0] / row["now"][0]:.2f}',
                f'{row["results"]["before"]:.4f} / {row["results"]["now"]:.4f}']))
        print('\n'.join(lines), file=display, flush=True)
        for row in rows:
            if 'max_auc_difference' in row:
                print(f'maps: largest AUC difference between the variants, over the blocks: '
                      f'{row["max_auc_difference"]:.1e}', file=display, flush=True)
    return rows


if __name__ == '__main__':
    main()
