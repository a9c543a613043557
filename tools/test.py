"""Evaluate a checkpoint with a config, as mmpretrain's / mmseg's / mmdet's tools/test.py do.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out FILE [--out-item pred|metrics]]
        [--amp] [--show] [--show-dir DIR] [--interval N] [--wait-time S] [--no-pin-memory]
        [--tta] [--no-strict-load] [--allow-non-finite] [--cfg-options ...]
        [--launcher none|pytorch|slurm|mpi]
    bash tools/dist_test.sh CONFIG CHECKPOINT NUM_PROCESSES [same options]

The checkpoint is checked (exists, is a complete checkpoint whose zip records pass their CRC,
holds nothing torch's safe unpickler refuses; a Hugging Face URL of the model zoo is downloaded
to its own cache name first) before the Runner is built, and loaded strictly
(``dinomamba_mm.StrictLoadHook``): a checkpoint of another model is an error listing the keys
and shapes that differ, not a score of random weights, and tensors holding NaN or Inf are an
error naming them (``--allow-non-finite`` loads them); ``--no-strict-load`` restores mmengine's
non-strict load. The other options are mmpretrain's. Like tools/train.py, it applies the
compatibility fixes of ``dinomamba_mm.compat`` that mmengine's Runner needs.
The visualisation options drive the config's ``default_hooks.visualization``, whichever scope's
hook it is (mmpretrain's ``VisualizationHook``, mmseg's ``SegVisualizationHook``, mmdet's
``DetVisualizationHook``).
``--tta`` uses the config's ``tta_model`` and ``tta_pipeline``; an mmpretrain config without
them gets flip TTA averaging the class scores, as mmpretrain does.
"""
import argparse
import copy
import os
import os.path as osp

from mmengine.config import Config, ConfigDict, DictAction
from mmengine.evaluator import DumpResults
from mmengine.fileio import dump
from mmengine.registry import RUNNERS

from dinomamba_mm.checkpoints import check_checkpoint_file, resolve_checkpoint
from dinomamba_mm.compat import (init_distributed, quiet_pkg_resources,
                                 unscope_dataloader_functions)
from dinomamba_mm.engine.safeguards import (add_strict_load_hook, check_dataset_paths,
                                            fall_back_to_fp32_without_accelerator,
                                            warn_unread_cfg_options)
from dinomamba_mm.install_mmcv import check_mmcv

PICKLE = ('.pkl', '.pickle')
METRIC_FILES = ('.json', '.yaml', '.yml') + PICKLE


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Test (and evaluate) a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file (path or URL)')
    parser.add_argument('--work-dir', help='the dir to save logs and metrics')
    parser.add_argument('--out', help='file to write the predictions (.pkl) or, with '
                        '--out-item metrics, the metrics (.json / .yaml / .pkl) to')
    parser.add_argument('--out-item', choices=['pred', 'metrics'],
                        help='what --out receives (default: pred)')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings of the config, key=value')
    parser.add_argument('--amp', action='store_true',
                        help='test under automatic mixed precision (test_cfg.fp16)')
    parser.add_argument('--no-amp-fallback', action='store_true',
                        help='keep test_cfg.fp16 on a machine without an accelerator (by '
                        'default it falls back to float32 with a warning)')
    parser.add_argument('--show-dir', help='save the visualised predictions in this dir')
    parser.add_argument('--show', action='store_true',
                        help='display the visualised predictions in a window')
    parser.add_argument('--interval', type=int, default=1,
                        help='visualise every INTERVAL-th sample')
    parser.add_argument('--wait-time', type=float, default=2.,
                        help='seconds each --show window stays')
    parser.add_argument('--no-pin-memory', action='store_true',
                        help="set the test dataloader's pin_memory to False")
    parser.add_argument('--tta', action='store_true', help='test-time augmentation')
    parser.add_argument('--no-strict-load', action='store_true',
                        help='load the checkpoint non-strictly (mmengine\'s default): keys '
                        'and shapes that differ from the model are only logged')
    parser.add_argument('--allow-non-finite', action='store_true',
                        help='load checkpoint tensors holding NaN or Inf (an error otherwise)')
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
        default='none',
        help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0,
                        help='set by torch.distributed.launch (torchrun sets LOCAL_RANK)')
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    if args.out_item is not None and args.out is None:
        parser.error(f'--out-item {args.out_item}: give the file with --out')
    if args.out is not None:
        allowed = METRIC_FILES if args.out_item == 'metrics' else PICKLE
        if not args.out.endswith(allowed):
            parser.error(f'--out {args.out!r} with --out-item {args.out_item or "pred"}: '
                         f'expected a file ending in one of {allowed}')
    if args.interval < 1:
        parser.error(f'--interval must be >= 1, got {args.interval}')
    return args


def _set_visualization(cfg: Config, args: argparse.Namespace) -> None:
    hook = cfg.get('default_hooks', {}).get('visualization')
    if hook is None:
        raise ValueError(
            f'--show / --show-dir: {args.config} has no default_hooks.visualization (e.g. '
            "mmpretrain's dict(type='VisualizationHook')); its default_hooks are "
            f"{sorted(cfg.get('default_hooks', {}))}")
    kind = hook['type'].split('.')[-1] if isinstance(hook['type'], str) else hook['type']
    hook.update(show=args.show, wait_time=args.wait_time, interval=args.interval)
    if kind == 'VisualizationHook':  # mmpretrain
        hook.update(enable=True, out_dir=args.show_dir)
    elif kind == 'SegVisualizationHook':  # mmseg: images go to the visualizer's save_dir
        hook.update(draw=True)
        if args.show_dir is not None:
            cfg.visualizer.save_dir = args.show_dir
    elif kind == 'DetVisualizationHook':  # mmdet
        hook.update(draw=True, test_out_dir=args.show_dir)
    else:
        raise ValueError(f'--show / --show-dir: unknown visualization hook {hook["type"]!r}, '
                         'expected VisualizationHook, SegVisualizationHook or '
                         'DetVisualizationHook')


def _set_tta(cfg: Config, args: argparse.Namespace) -> None:
    if 'tta_model' not in cfg or 'tta_pipeline' not in cfg:
        if cfg.get('default_scope') != 'mmpretrain':
            present = [k for k in ('tta_model', 'tta_pipeline') if k in cfg] or 'neither'
            raise ValueError(f'--tta: {args.config} (scope {cfg.get("default_scope")!r}) needs '
                             f'tta_model and tta_pipeline; it has {present}')
        # mmpretrain's default: the image and its flip, class scores averaged
        cfg.setdefault('tta_model', dict(type='mmpretrain.AverageClsScoreTTA'))
        if 'tta_pipeline' not in cfg:
            pipeline = copy.deepcopy(cfg.test_dataloader.dataset.pipeline)
            pipeline[-1] = dict(type='TestTimeAug', transforms=[
                [dict(type='RandomFlip', prob=1.), dict(type='RandomFlip', prob=0.)],
                [cfg.test_dataloader.dataset.pipeline[-1]]])
            cfg.tta_pipeline = pipeline
    cfg.model = ConfigDict(**cfg.tta_model, module=cfg.model)
    cfg.test_dataloader.dataset.pipeline = cfg.tta_pipeline


def merge_args(cfg: Config, args: argparse.Namespace) -> Config:
    """Apply the command line to ``cfg`` (``--cfg-options`` last, so they win)."""
    cfg.launcher = args.launcher
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])
    cfg.load_from = args.checkpoint
    cfg.resume = False
    if args.amp:
        cfg.test_cfg = dict(cfg.get('test_cfg') or {}, fp16=True)
    if args.show or args.show_dir is not None:
        _set_visualization(cfg, args)
    if args.tta:
        _set_tta(cfg, args)
    if args.no_pin_memory:
        cfg.test_dataloader.pin_memory = False
    if not args.no_strict_load:
        add_strict_load_hook(cfg, args.allow_non_finite)
    if args.cfg_options is not None:
        warn_unread_cfg_options(cfg, args.cfg_options)
        cfg.merge_from_dict(args.cfg_options)
    if not args.no_amp_fallback:
        fall_back_to_fp32_without_accelerator(cfg)
    unscope_dataloader_functions(cfg)
    return cfg


def main(argv=None) -> dict:
    args = parse_args(argv)
    check_mmcv()
    check_checkpoint_file(args.checkpoint)
    with quiet_pkg_resources():
        cfg = merge_args(Config.fromfile(args.config), args)
    check_dataset_paths(cfg, loaders=('test_dataloader', ))

    init_distributed(args.launcher, cfg.get('env_cfg', {}))
    cfg.load_from = resolve_checkpoint(cfg.load_from)
    runner = RUNNERS.build(cfg)  # cfg.runner_type, mmengine's Runner by default
    if args.out is not None and args.out_item != 'metrics':
        runner.test_evaluator.metrics.append(DumpResults(out_file_path=args.out))
    metrics = runner.test()
    if args.out is not None and args.out_item == 'metrics':
        dump(metrics, args.out)
    return metrics


if __name__ == '__main__':
    main()
