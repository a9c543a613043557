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
from typing import Optional

import torch
from mmengine.config import Config, ConfigDict, DictAction
from mmengine.dataset import InfiniteSampler
from mmengine.dist import get_world_size
from mmengine.logging import print_log
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

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


def fit_dataloaders_to_machine(cfg: Config, cfg_options: Optional[dict]) -> None:
    """Fit the dataloaders' ``num_workers`` and ``pin_memory`` to this machine, and log it.

    The configs give the values for the machines they were written for (the ImageNet DINO
    config: 10 workers per GPU, pinned memory); like mmpretrain's tools/train.py, which sets the
    dataloader defaults, this tool adapts them, and a value given with ``--cfg-options`` (e.g.
    ``train_dataloader.num_workers=16``) is kept as given:

    - ``num_workers``: at most the CPU cores this process may use (``os.sched_getaffinity``)
      shared by the run's processes on this machine (``LOCAL_WORLD_SIZE``, set by torchrun),
      at least 1; torch suggests no more than the cores, and warns.
    - ``pin_memory``: off when torch finds no accelerator, where it would pin nothing (and
      warn in every epoch).

    Args:
        cfg (Config): the merged config, changed in place.
        cfg_options (dict, optional): the ``--cfg-options`` given.
    """
    given = set(cfg_options or ())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
    processes = int(os.environ.get('LOCAL_WORLD_SIZE', 1))
    max_workers = max(1, (cores or 1) // processes)
    accelerator = torch.accelerator.is_available()
    changes = []
    for name in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        loader = cfg.get(name, None)
        if not isinstance(loader, (dict, ConfigDict)):
            continue
        workers = loader.get('num_workers', 0)
        if workers > max_workers and f'{name}.num_workers' not in given:
            loader.num_workers = max_workers
            changes.append(f'{name}.num_workers {workers} -> {max_workers}')
        if loader.get('pin_memory') and not accelerator and f'{name}.pin_memory' not in given:
            loader.pin_memory = False
            changes.append(f'{name}.pin_memory True -> False')
    if changes:
        print_log(f'dataloaders fitted to this machine ({cores} CPU cores for {processes} '
                  f'process(es), {"an" if accelerator else "no"} accelerator): '
                  f'{", ".join(changes)} (--cfg-options KEY=VALUE keeps a value)',
                  logger='current')


def check_full_batches(runner: Runner) -> None:
    """Log the training data's size, or raise ValueError when it gives no full batch.

    Builds the training loop as ``runner.train()`` does (which then reuses it): its dataloader
    and dataset. With ``drop_last`` and fewer images than ``batch_size`` (per process), an epoch
    has no batch: mmengine then fails on "`epoch_length` must be a positive integer, but got 0"
    while building the schedulers, or trains nothing. An infinite sampler (iteration-based
    runs) repeats the images, which always fills a batch.
    """
    loader = runner.train_loop.dataloader
    batch_sampler = loader.batch_sampler
    sampler = getattr(batch_sampler, 'sampler', loader.sampler)
    batch_size = getattr(batch_sampler, 'batch_size', loader.batch_size)
    drop_last = getattr(batch_sampler, 'drop_last', loader.drop_last)
    images = len(loader.dataset)
    processes = get_world_size()
    per_process = '' if processes == 1 else f', {len(sampler)} per process of {processes}'
    infinite = isinstance(sampler, InfiniteSampler)
    if infinite or len(loader) > 0:
        print_log(f'train_dataloader: {images} images{per_process}, batch_size {batch_size}, '
                  f'drop_last {drop_last}: '
                  + ('an infinite sampler' if infinite else f'{len(loader)} batches per epoch'),
                  logger='current')
        return
    raise ValueError(
        f'train_dataloader gives no full batch: its dataset has {images} images'
        f'{per_process}, fewer than batch_size {batch_size}, and drop_last={drop_last} drops '
        'an incomplete batch, so an epoch would train nothing. Add images, or lower the batch '
        f'size (e.g. --cfg-options train_dataloader.batch_size={max(1, len(sampler))})'
        if images else 'train_dataloader gives no batch: its dataset has no images')


def main(argv=None) -> None:
    args = parse_args(argv)
    check_mmcv()
    with quiet_pkg_resources():
        cfg = merge_args(Config.fromfile(args.config), args)
    check_train_length(cfg)
    if cfg.get('load_from'):
        check_checkpoint_file(cfg.load_from, 'load_from checkpoint')
    check_dataset_paths(cfg)
    fit_dataloaders_to_machine(cfg, args.cfg_options)
    with lock_work_dir(cfg.work_dir, args.launcher), explain_stopped_process(cfg):
        init_distributed(args.launcher, cfg.get('env_cfg', {}))
        if cfg.get('load_from'):
            cfg.load_from = resolve_checkpoint(cfg.load_from, 'load_from checkpoint')
        runner = RUNNERS.build(cfg)  # cfg.runner_type, mmengine's Runner by default
        check_full_batches(runner)
        runner.train()


if __name__ == '__main__':
    main()
