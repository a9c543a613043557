"""Evaluate a checkpoint with a config, as mmpretrain's / mmseg's / mmdet's tools/test.py do.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out results.pkl] [--cfg-options ...]
    bash tools/dist_test.sh CONFIG CHECKPOINT NUM_PROCESSES [same options]
"""
import argparse
import os
import os.path as osp

from mmengine.config import Config, DictAction
from mmengine.evaluator import DumpResults
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from dinomamba_mm.datasets.layout_check import check_dataset_paths


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Test (and evaluate) a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file (path or URL)')
    parser.add_argument('--work-dir', help='the dir to save logs and metrics')
    parser.add_argument(
        '--out', help='dump the predictions to this pickle file (.pkl)')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings of the config, key=value')
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
        default='none',
        help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    if args.out is not None and not args.out.endswith(('.pkl', '.pickle')):
        parser.error(f'--out {args.out!r}: expected a .pkl or .pickle file')
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    cfg = Config.fromfile(args.config)
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    cfg.launcher = args.launcher
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])
    cfg.load_from = args.checkpoint
    check_dataset_paths(cfg, loaders=('test_dataloader', ))
    cfg.resume = False

    runner = RUNNERS.build(cfg) if 'runner_type' in cfg else Runner.from_cfg(cfg)
    if args.out is not None:
        runner.test_evaluator.metrics.append(DumpResults(out_file_path=args.out))
    return runner.test()


if __name__ == '__main__':
    main()
