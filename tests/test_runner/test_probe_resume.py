"""A linear probe killed after an epoch and resumed trains on exactly as the uninterrupted run:
the same batches (seed, sampler), the same augmentation draws (workers seeded per epoch from the
restored generators) and the same losses, although it validates right after each checkpoint.

The run is the demo's probe (small, shipped teacher) with the ImageNet probe's data loading
(restarted workers seeded by seed_worker_from_loader, checked below) and random crops."""
import os.path as osp
import runpy

import numpy as np
import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.runner import Runner

import dinomamba_mm  # noqa: F401

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIG = osp.join(ROOT, 'configs', 'demo', 'linear-probe_dinovim-demo_synthetic.py')
IMAGENET_PROBE = osp.join(ROOT, 'configs', 'dino', 'benchmarks',
                          'dinovim-base-p16_dino-ours_8xb128-linear-coslr-100e_in1k.py')
SEEDED_WORKERS = dict(persistent_workers=False,
                      worker_init_fn=dict(type='dinomamba_mm.seed_worker_from_loader'))


class Recorder(Hook):
    priority = 'LOWEST'

    def __init__(self, stop_after_epoch=None):
        self.losses, self.stop_after_epoch = [], stop_after_epoch

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        self.losses.append(outputs['loss'].item())

    def after_val_epoch(self, runner, metrics=None):
        if runner.epoch == self.stop_after_epoch:  # killed after the checkpoint and validation
            raise KeyboardInterrupt


def run(data_root, work_dir, resume=False, stop_after_epoch=None):
    cfg = Config.fromfile(CONFIG)
    cfg.work_dir, cfg.resume = str(work_dir), resume
    cfg.train_cfg.update(max_epochs=3, val_interval=1)
    cfg.default_hooks.checkpoint.interval = 1
    cfg.param_scheduler = [dict(type='CosineAnnealingLR', T_max=3, by_epoch=True, begin=0,
                                end=3)]
    for loader in ('train_dataloader', 'val_dataloader'):
        cfg[loader].update(batch_size=4, num_workers=1)
        cfg[loader].dataset.data_root = data_root
    cfg.train_dataloader.update(SEEDED_WORKERS)
    cfg.train_dataloader.dataset.pipeline.insert(
        1, dict(type='RandomResizedCrop', scale=32, crop_ratio_range=(0.3, 1.0)))
    runner = Runner.from_cfg(cfg)
    recorder = Recorder(stop_after_epoch)
    runner.register_hook(recorder)
    try:
        runner.train()
    except KeyboardInterrupt:
        pass
    return runner, recorder.losses


def test_a_resumed_probe_continues_loss_by_loss(tmp_path):
    runpy.run_path(osp.join(ROOT, 'tools', 'data', 'make_synthetic.py'))['main'](
        ['--out', str(tmp_path / 'data'), '--layouts', 'cls', '--num-train', '8', '--num-val',
         '4', '--size', '40'])
    data_root = str(tmp_path / 'data' / 'cls')
    full, full_losses = run(data_root, tmp_path / 'full')
    _, first = run(data_root, tmp_path / 'killed', stop_after_epoch=1)
    resumed, rest = run(data_root, tmp_path / 'killed', resume=True)
    assert len(full_losses) == 6 and len(first) == 2 and len(rest) == 4
    np.testing.assert_allclose(first + rest, full_losses, rtol=1e-6, atol=0)
    for key, value in full.model.state_dict().items():
        torch.testing.assert_close(resumed.model.state_dict()[key], value, msg=key)


def test_the_imagenet_probes_load_data_as_the_resume_test_does():
    cfg = Config.fromfile(IMAGENET_PROBE)
    assert {k: cfg.train_dataloader.get(k) for k in SEEDED_WORKERS} == SEEDED_WORKERS
    assert cfg.randomness.seed is not None
    assert 'dinomamba_mm.RandomStateHook' in [h['type'] for h in cfg.custom_hooks]
