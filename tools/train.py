"""Train a model from a config, as mmpretrain's / mmseg's / mmdet's tools/train.py do.

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]] [--amp] [--no-strict-load]
        [--cfg-options k=v ...]
    bash tools/dist_train.sh CONFIG NUM_PROCESSES [same options]

``--resume`` without a checkpoint resumes from the one ``WORK_DIR/last_checkpoint`` names (the
file of that name in WORK_DIR when the dir was moved or copied), or, when that one is truncated
or gone, from the newest intact checkpoint of the same naming in WORK_DIR (``epoch_N.pth`` /
``iter_N.pth``; with a warning); with nothing to resume it says so and trains from scratch.
A checkpoint given (``--resume CKPT``, ``load_from``) is checked before anything is built (a
Hugging Face URL of the model zoo is downloaded to its own cache name first), and every
checkpoint is loaded strictly (``dinomamba_mm.StrictLoadHook``) unless ``--no-strict-load``. A
second run started in a work dir in use is refused, naming the first; ``--cfg-options`` keys
nothing reads are warned about. These safeguards live in ``dinomamba_mm/engine/safeguards/``
(docs/reliability.md lists them with their switches).

Works for every config of this project (mmpretrain, mmseg and mmdet scopes): the config's
``custom_imports`` registers dinomamba_mm, and ``default_scope`` picks the framework. This tool
applies the compatibility fixes of ``dinomamba_mm.compat`` that mmengine's Runner needs (a
distributed launch on machines without CUDA uses gloo; a dataloader function of a
``dinomamba_mm::`` base is built).
"""
import argparse
import logging
import os
import os.path as osp

from mmengine.config import Config, ConfigDict, DictAction
from mmengine.logging import print_log
from mmengine.registry import RUNNERS

from dinomamba_mm.checkpoints import (check_checkpoint_file, find_resumable_checkpoint,
                                      resolve_checkpoint)
from dinomamba_mm.compat import (init_distributed, quiet_pkg_resources,
                                 unscope_dataloader_functions)
from dinomamba_mm.engine.safeguards import (add_custom_hook, add_strict_load_hook,
                                            check_dataset_paths, check_train_length,
                                            explain_stopped_process,
                                            fall_back_to_fp32_without_accelerator,
                                            lock_work_dir, warn_unread_cfg_options)
from dinomamba_mm.install_mmcv import check_mmcv


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument(
        '--resume',
        nargs='?',
        type=str,
        const='auto',
        help='resume from the given checkpoint; without a value, from the '
        'latest checkpoint in the work dir')
    parser.add_argument(
        '--amp', action='store_true', help='enable automatic mixed precision')
    parser.add_argument(
        '--no-amp-fallback', action='store_true',
        help='keep AMP on a machine without an accelerator (by default it falls back to '
        'float32 with a warning)')
    parser.add_argument(
        '--no-strict-load',
        action='store_true',
        help='load load_from / resumed checkpoints non-strictly (mmengine\'s default): keys '
        'and shapes that differ from the model are only logged')
    parser.add_argument(
        '--no-validate',
        action='store_true',
        help='skip evaluation during training')
    parser.add_argument(
        '--auto-scale-lr',
        action='store_true',
        help='scale the learning rate by the actual batch size '
        '(config field auto_scale_lr.base_batch_size)')
    parser.add_argument(
        '--no-pin-memory',
        action='store_true',
        help='do not pin memory in the dataloaders')
    parser.add_argument(
        '--no-persistent-workers',
        action='store_true',
        help='do not keep dataloader workers alive between epochs')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings of the config, key=value (e.g. '
        'train_dataloader.batch_size=8 model.backbone.arch=tiny)')
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
        default='none',
        help='job launcher')
    # torch.distributed.launch passes --local-rank; torchrun sets LOCAL_RANK.
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0,
                        help='set by torch.distributed.launch (torchrun sets LOCAL_RANK)')
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def merge_args(cfg: Config, args: argparse.Namespace) -> Config:
    """Apply the command-line options to the config."""
    if args.cfg_options is not None:
        warn_unread_cfg_options(cfg, args.cfg_options)
        cfg.merge_from_dict(args.cfg_options)
    cfg.launcher = args.launcher

    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])

    if args.amp:
        optim_wrapper = cfg.optim_wrapper.get('type', 'OptimWrapper')
        if optim_wrapper in ('OptimWrapper', 'AmpOptimWrapper'):
            cfg.optim_wrapper.type = 'AmpOptimWrapper'
            cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')
        else:
            raise ValueError(
                f'--amp needs optim_wrapper.type OptimWrapper or '
                f'AmpOptimWrapper, got {optim_wrapper!r}')

    if not args.no_amp_fallback:
        fall_back_to_fp32_without_accelerator(cfg)
    if args.resume == 'auto':
        cfg.load_from = find_resumable_checkpoint(cfg.work_dir)
        cfg.resume = cfg.load_from is not None
        if cfg.resume:
            print_log(f'--resume: resuming from {cfg.load_from}', logger='current')
        else:
            print_log(f'--resume: nothing to resume in {cfg.work_dir} (no last_checkpoint file '
                      'naming an intact checkpoint, no intact *.pth): training from scratch',
                      logger='current', level=logging.WARNING)
    elif args.resume is not None:
        check_checkpoint_file(args.resume, '--resume checkpoint')
        cfg.resume = True
        cfg.load_from = args.resume
    if not args.no_strict_load:
        add_strict_load_hook(cfg)
    add_custom_hook(cfg, dict(type='dinomamba_mm.SafeUnpickleHook'))

    if args.no_validate:
        cfg.val_cfg = None
        cfg.val_dataloader = None
        cfg.val_evaluator = None

    if args.auto_scale_lr:
        if 'auto_scale_lr' not in cfg:
            raise ValueError(
                f'--auto-scale-lr: config {args.config} has no auto_scale_lr '
                'field (expected auto_scale_lr=dict(base_batch_size=...))')
        cfg.auto_scale_lr.enable = True

    def set_loader_option(key: str, value) -> None:
        for name in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
            loader = cfg.get(name, None)
            if isinstance(loader, (dict, ConfigDict)):
                loader[key] = value

    if args.no_pin_memory:
        set_loader_option('pin_memory', False)
    if args.no_persistent_workers:
        set_loader_option('persistent_workers', False)
    unscope_dataloader_functions(cfg)
    return cfg


def main(argv=None) -> None:
    args = parse_args(argv)
    check_mmcv()
    with quiet_pkg_resources():
        cfg = merge_args(Config.fromfile(args.config), args)
    check_train_length(cfg)
    if cfg.get('load_from'):
        check_checkpoint_file(cfg.load_from, 'load_from checkpoint')
    check_dataset_paths(cfg)
    with lock_work_dir(cfg.work_dir, args.launcher), explain_stopped_process(cfg):
        init_distributed(args.launcher, cfg.get('env_cfg', {}))
        if cfg.get('load_from'):
            cfg.load_from = resolve_checkpoint(cfg.load_from, 'load_from checkpoint')
        RUNNERS.build(cfg).train()  # cfg.runner_type, mmengine's Runner by default


if __name__ == '__main__':
    main()
