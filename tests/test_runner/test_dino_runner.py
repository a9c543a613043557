"""The DINO config family through mmengine's Runner: smoke runs, exact resume, 2-process DDP.

Each config in configs/dino/ is loaded unchanged and shrunk (tiny backbone of the same type,
32 / 16 px crops, 32 prototypes, batch 2, float32 OptimWrapper instead of bf16 AMP).
"""
import os
import os.path as osp
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.optim import OptimWrapper
from mmengine.registry import PARAM_SCHEDULERS
from mmengine.runner import Runner

import dinomamba_mm  # noqa: F401
from dinomamba_mm.compat import leave_default_statistics_out
from dinomamba_mm.engine.safeguards import SafeUnpickleHook

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(ROOT, 'tests'))
from helpers.tiny_cls_data import write_tiny_cls_dataset  # noqa: E402

CONFIG_DIR = osp.join(ROOT, 'configs', 'dino')
MAMBA_ARCH = dict(_delete_=True, embed_dims=16, num_layers=2, headdim=8, d_state=4)
VIT_ARCH = dict(_delete_=True, embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32)
TINY_BACKBONES = {
    'dinomamba_mm.DinoVim': dict(arch=MAMBA_ARCH),
    'dinomamba_mm.DinoMambaReg': dict(arch=MAMBA_ARCH),
    'dinomamba_mm.LinearViT': dict(arch=VIT_ARCH),
    'mmpretrain.VisionTransformer': dict(arch=VIT_ARCH),
}
TINY = '''
_base_ = ['{config}']
model = dict(
    backbone=dict(img_size=32, patch_size=8, drop_path_rate={drop_path}, **{backbone}),
    neck=dict(in_channels=16, out_channels=32, hidden_channels=32, bottleneck_channels=8),
    head=dict(out_channels=32))
train_dataloader = dict(
    batch_size=2, num_workers={workers}, pin_memory=False,
    dataset=dict(
        _delete_=True, type='CustomDataset', data_root='{data}', ann_file='ann.txt',
        data_prefix='', pipeline=[
            dict(type='LoadImageFromFile'),
            dict(type='dinomamba_mm.DINOMultiCrop', global_crop_size=32, local_crop_size=16,
                 num_local_crops=2),
            dict(type='PackInputs')]))
optim_wrapper = dict(_delete_=True, type='OptimWrapper',
                     optimizer=dict(type='AdamW', lr=5e-4, weight_decay=0.04),
                     paramwise_cfg=dict(bias_decay_mult=0., flat_decay_mult=0.))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-9, by_epoch=True, begin=0, end=1,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', T_max={epochs} - 1, eta_min=1e-6, by_epoch=True, begin=1,
         end={epochs}, convert_to_iter_based=True),
    dict(type='CosineAnnealingParamScheduler', param_name='weight_decay', eta_min_ratio=10.0,
         T_max={epochs}, by_epoch=True, begin=0, end={epochs}, convert_to_iter_based=True)]
train_cfg = dict(max_epochs={epochs})
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval={checkpoint_interval}))
env_cfg = dict(dist_cfg=dict(backend='gloo'))
'''


def tiny_config(tmp_path, config_name, epochs=2, num_images=4, workers=0, drop_path=0.1,
                checkpoint_interval=1, extra=''):
    data = write_tiny_cls_dataset(str(tmp_path / 'data'), num_images=num_images, size=40)
    base = Config.fromfile(osp.join(CONFIG_DIR, config_name))
    text = TINY.format(config=osp.join(CONFIG_DIR, config_name), data=data, epochs=epochs,
                       workers=workers, drop_path=drop_path,
                       checkpoint_interval=checkpoint_interval,
                       backbone=TINY_BACKBONES[base.model.backbone.type]) + extra
    path = tmp_path / f'tiny_{config_name}'
    path.write_text(text)
    return path


class LossRecorder(Hook):
    priority = 'LOWEST'

    def __init__(self):
        self.losses = []

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        self.losses.append(outputs['loss'].item())


class StopAfterEpoch(Hook):
    """Stands for a job killed right after the checkpoint of epoch ``epoch`` (1-based)."""
    priority = 'LOWEST'

    def __init__(self, epoch):
        self.epoch = epoch

    def after_train_epoch(self, runner):
        if runner.epoch + 1 == self.epoch:
            raise KeyboardInterrupt


def run(config_path, work_dir, name, resume=False, extra_hooks=()):
    cfg = Config.fromfile(str(config_path))
    cfg.work_dir = str(work_dir)
    cfg.experiment_name = name
    cfg.resume = resume
    runner = Runner.from_cfg(cfg)
    recorder = LossRecorder()
    for hook in (recorder, *extra_hooks):
        runner.register_hook(hook)
    try:
        runner.train()
    except KeyboardInterrupt:
        pass
    return runner, recorder.losses


CONFIGS = sorted(f for f in os.listdir(CONFIG_DIR) if f.endswith('.py'))


def test_family_is_complete():
    assert CONFIGS == [
        'dino_dinomambareg-base-interleaved-p16_8xb64-amp-coslr-100e_in1k.py',
        'dino_dinomambareg-base-p16_8xb64-amp-coslr-100e_in1k.py',
        'dino_dinovim-base-interleaved-p16_8xb64-amp-coslr-100e_in1k.py',
        'dino_dinovim-base-p16_8xb64-amp-coslr-100e_in1k.py',
        'dino_dinovim-small-interleaved-p16_8xb64-amp-coslr-100e_in1k.py',
        'dino_dinovim-small-p16_8xb64-amp-coslr-100e_in1k.py',
        'dino_dinovim-tiny-interleaved-p16_8xb64-amp-coslr-100e_in1k.py',
        'dino_dinovim-tiny-p16_8xb64-amp-coslr-100e_in1k.py',
        'dino_linearvit-base-p16_8xb64-amp-coslr-100e_in1k.py',
        'dino_vit-base-p16_8xb64-amp-coslr-100e_in1k.py',
    ]
    cfg = Config.fromfile(
        osp.join(CONFIG_DIR, 'dino_dinovim-base-p16_8xb64-amp-coslr-100e_in1k.py'))
    assert cfg.optim_wrapper.type == 'AmpOptimWrapper' and cfg.optim_wrapper.dtype == 'bfloat16'
    assert cfg.optim_wrapper.optimizer.lr == 5e-4 and cfg.auto_scale_lr.base_batch_size == 256
    assert cfg.model.neck.out_channels == 65536 and cfg.train_cfg.max_epochs == 100
    hooks = {h.type.split('.')[-1]: h for h in cfg.custom_hooks}
    assert hooks['DINOTeacherEMAHook'].base_momentum == 0.996
    assert hooks['DINOTeacherTempHook'].teacher_temp == 0.04
    (weight_decay, ) = [s for s in cfg.param_scheduler if s.get('param_name') == 'weight_decay']
    assert weight_decay.eta_min_ratio * cfg.optim_wrapper.optimizer.weight_decay == 0.4
    assert hooks['FreezeLastLayerHook'].freeze_epochs == 1
    # DINO's clipping (per parameter), not mmengine's global one as well
    assert hooks['PerParameterGradClipHook'].max_norm == 3.0
    assert 'clip_grad' not in cfg.optim_wrapper
    assert 'RandomStateHook' in hooks
    assert cfg.train_dataloader.persistent_workers is False
    assert cfg.train_dataloader.worker_init_fn.type == 'dinomamba_mm.seed_worker_from_loader'
    crop = cfg.train_dataloader.dataset.pipeline[1]
    assert (crop.num_global_crops, crop.num_local_crops) == (2, 8)
    assert (crop.global_crop_size, crop.local_crop_size) == (224, 96)


def test_lr_schedule_is_dinos():
    """The recipe's mmengine schedulers give DINO's warm-up + cosine, iteration by iteration."""
    cfg = Config.fromfile(osp.join(ROOT, 'configs', '_base_', 'schedules',
                                   'dino_adamw_coslr_100e.py'))
    base, epoch_length = cfg.optim_wrapper.optimizer.lr, 3
    optim = OptimWrapper(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=base))
    schedulers = [PARAM_SCHEDULERS.build(dict(s), default_args=dict(
        optimizer=optim, epoch_length=epoch_length)) for s in cfg.param_scheduler]
    lrs = []
    for _ in range(100 * epoch_length):
        lrs.append(optim.optimizer.param_groups[0]['lr'])
        for scheduler in schedulers:
            scheduler.step()
    warmup = 10 * epoch_length
    # DINO's warm-up: np.linspace(0, base, warmup) (start_factor 1e-9 stands for 0)
    np.testing.assert_allclose(lrs[:warmup], np.linspace(0, base, warmup), rtol=1e-7,
                               atol=1e-12)
    steps = np.arange(90 * epoch_length)  # DINO's cosine_scheduler after the warm-up
    cosine = 1e-6 + 0.5 * (base - 1e-6) * (1 + np.cos(np.pi * steps / len(steps)))
    np.testing.assert_allclose(lrs[warmup:], cosine, rtol=1e-6)


def test_weight_decay_schedule_is_dinos_and_resumes():
    """The recipe's weight-decay scheduler (mmengine's CosineAnnealingParamScheduler, which
    replaced our CosineWeightDecayHook) gives DINO's cosine_scheduler(0.04, 0.4) at every
    iteration, keeps the groups without decay at 0, and continues exactly after a resume."""
    cfg = Config.fromfile(osp.join(ROOT, 'configs', '_base_', 'schedules',
                                   'dino_adamw_coslr_100e.py'))
    (spec, ) = [s for s in cfg.param_scheduler if s.get('param_name') == 'weight_decay']
    base = cfg.optim_wrapper.optimizer.weight_decay
    epochs, epoch_length = cfg.train_cfg.max_epochs, 3

    def build():
        weight, bias = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
        optim = OptimWrapper(torch.optim.AdamW(
            [dict(params=[weight]), dict(params=[bias], weight_decay=0.)], lr=1e-3,
            weight_decay=base))
        scheduler = PARAM_SCHEDULERS.build(dict(spec), default_args=dict(
            optimizer=optim, epoch_length=epoch_length))
        return optim, scheduler

    optim, scheduler = build()
    values, saved = [], None
    for it in range(epochs * epoch_length):
        values.append([group['weight_decay'] for group in optim.optimizer.param_groups])
        scheduler.step()
        if it == 100:
            saved = (optim.state_dict(), scheduler.state_dict())
    values = np.array(values)
    steps = np.arange(epochs * epoch_length)  # DINO's utils.cosine_scheduler, no warm-up
    closed_form = 0.4 + 0.5 * (base - 0.4) * (1 + np.cos(np.pi * steps / len(steps)))
    np.testing.assert_allclose(values[:, 0], closed_form, rtol=1e-12, atol=0)
    assert np.all(values[:, 1] == 0.)

    resumed_optim, resumed = build()
    resumed_optim.load_state_dict(saved[0])
    resumed.load_state_dict(saved[1])
    for it in range(101, epochs * epoch_length):
        assert [g['weight_decay'] for g in resumed_optim.optimizer.param_groups] == \
            [values[it, 0], 0.]
        resumed.step()


@pytest.mark.parametrize('config_name', [
    'dino_dinovim-base-p16_8xb64-amp-coslr-100e_in1k.py',
    'dino_dinomambareg-base-p16_8xb64-amp-coslr-100e_in1k.py',
    'dino_linearvit-base-p16_8xb64-amp-coslr-100e_in1k.py',
    'dino_vit-base-p16_8xb64-amp-coslr-100e_in1k.py',
])
def test_two_iterations(tmp_path, config_name):
    # 2 images, batch 2, 2 epochs: iteration 0 with the last layer frozen, iteration 1 without
    path = tiny_config(tmp_path, config_name, epochs=2, num_images=2, checkpoint_interval=2)
    runner, losses = run(path, tmp_path / 'work', 'smoke')
    assert runner.iter == 2 and len(losses) == 2 and np.all(np.isfinite(losses))
    model = runner.model
    expected_type = Config.fromfile(osp.join(CONFIG_DIR, config_name)).model.backbone.type
    assert type(model.backbone).__name__ == expected_type.split('.')[-1]
    optimised = {id(p) for g in runner.optim_wrapper.optimizer.param_groups for p in g['params']}
    assert not any(id(p) in optimised for p in model.teacher.parameters())
    # momentum of the last update: cosine over 2 iterations at iteration 1
    assert model.momentum.item() == pytest.approx(1 - 0.004 * (1 + np.cos(np.pi / 2)) / 2)
    ckpt = torch.load(str(tmp_path / 'work' / 'epoch_2.pth'), map_location='cpu')
    state = ckpt['state_dict']
    prefix = 'teacher.backbone.'
    teacher_keys = [k[len(prefix):] for k in state if k.startswith(prefix)]
    assert sorted(teacher_keys) == sorted(model.backbone.state_dict())
    assert {'head.center', 'head.teacher_temp', 'momentum'} <= set(state)
    assert state['head.center'].abs().sum() > 0


def test_resume_continues_exactly(tmp_path):
    """Killed after epoch 1 of 2 and resumed = uninterrupted, loss by loss and weight by weight.

    With the configs' randomness: drop path 0.1 in the main process and a dataloader worker
    (restarted each epoch, seeded by seed_worker_from_loader) drawing the crops; the
    RandomStateHook in the checkpoint is what makes the resumed draws the same.
    """
    extra = ("custom_hooks = [dict(type='dinomamba_mm.DINOTeacherEMAHook'),"
             " dict(type='dinomamba_mm.DINOTeacherTempHook', warmup_teacher_temp=0.04,"
             " teacher_temp=0.07, warmup_epochs=2),"
             " dict(type='dinomamba_mm.FreezeLastLayerHook', freeze_epochs=1),"
             " dict(type='dinomamba_mm.PerParameterGradClipHook', max_norm=3.0),"
             " dict(type='dinomamba_mm.RandomStateHook')]\n")
    path = tiny_config(tmp_path, 'dino_vit-base-p16_8xb64-amp-coslr-100e_in1k.py',
                       epochs=2, num_images=4, workers=1, drop_path=0.1, extra=extra)
    full, full_losses = run(path, tmp_path / 'full', 'full')
    _, first = run(path, tmp_path / 'killed', 'killed', extra_hooks=[StopAfterEpoch(1)])
    resumed, rest = run(path, tmp_path / 'killed', 'resumed', resume=True)

    assert len(full_losses) == 4 and len(first) == 2 and len(rest) == 2
    np.testing.assert_allclose(first + rest, full_losses, rtol=1e-6, atol=0)
    assert resumed.model.head.teacher_temp.item() == pytest.approx(0.07)
    full_state, resumed_state = full.model.state_dict(), resumed.model.state_dict()
    for key, value in full_state.items():
        torch.testing.assert_close(resumed_state[key], value, rtol=1e-6, atol=1e-7,
                                   msg=key)


def test_resume_without_random_states_is_refused(tmp_path):
    """The same run resumed from a checkpoint the hook did not write: the resumed draws
    would differ, so it is an error naming the missing key, not a silent divergence."""
    path = tiny_config(tmp_path, 'dino_vit-base-p16_8xb64-amp-coslr-100e_in1k.py',
                       epochs=2, num_images=4)
    run(path, tmp_path / 'killed', 'killed', extra_hooks=[StopAfterEpoch(1)])
    checkpoint_path = tmp_path / 'killed' / 'epoch_1.pth'
    checkpoint = torch.load(str(checkpoint_path), map_location='cpu', weights_only=False)
    del checkpoint['random_states']
    leave_default_statistics_out(checkpoint['message_hub'])  # as our checkpoint hooks save it
    torch.save(checkpoint, str(checkpoint_path))
    with pytest.raises(ValueError, match="no 'random_states'.*RandomStateHook"):
        run(path, tmp_path / 'killed', 'resumed', resume=True)


def test_per_iteration_checkpoints_are_refused_when_training_starts(tmp_path):
    """Under EpochBasedTrainLoop they cannot be resumed: refused at the start, not days later
    at resume time."""
    extra = "default_hooks = dict(checkpoint=dict(by_epoch=False, interval=1))\n"
    path = tiny_config(tmp_path, 'dino_vit-base-p16_8xb64-amp-coslr-100e_in1k.py',
                       epochs=2, num_images=4, extra=extra)
    with pytest.raises(ValueError, match=r'^ResumableCheckpointHook\(by_epoch=False, interval=1\) '
                                         'under EpochBasedTrainLoop saves checkpoints that '
                                         'cannot be resumed'):
        run(path, tmp_path / 'work', 'start')
    assert not list((tmp_path / 'work').glob('*.pth'))


@pytest.mark.parametrize('iteration, message', [
    (1, 'cannot resume from iteration 1 under EpochBasedTrainLoop: the checkpoint was saved '
        'during epoch 1 (2 iterations per epoch): the loop would restart that epoch from its '
        'first batch and train more iterations than max_iters. No epoch had finished'),
    (2, 'cannot resume from iteration 2 under EpochBasedTrainLoop: the checkpoint was saved '
        'after the last iteration of epoch 1 by a per-iteration CheckpointHook, which records '
        'epoch 1 as not yet finished: the loop would train it again. Resume from epoch_1.pth'),
])
def test_resuming_a_per_iteration_checkpoint_of_another_hook_is_refused(tmp_path, iteration,
                                                                          message):
    """Checkpoints of mmengine's own CheckpointHook(by_epoch=False) inside and at the end of
    an epoch: mmengine would replay the epoch (RandomStateHook refused even the second)."""
    stock = "default_hooks = dict(checkpoint=dict(type='CheckpointHook', by_epoch=False, " \
            "interval=1))\n"
    path = tiny_config(tmp_path, 'dino_vit-base-p16_8xb64-amp-coslr-100e_in1k.py',
                       epochs=2, num_images=4, extra=stock)
    # what tools/train.py adds to any config, so that torch's safe unpickler reads the files
    run(path, tmp_path / 'killed', 'killed', extra_hooks=[StopAfterEpoch(1), SafeUnpickleHook()])
    (tmp_path / 'killed' / 'last_checkpoint').write_text(
        str(tmp_path / 'killed' / f'iter_{iteration}.pth'))
    path = tiny_config(tmp_path, 'dino_vit-base-p16_8xb64-amp-coslr-100e_in1k.py',
                       epochs=2, num_images=4)
    with pytest.raises(ValueError, match=re.escape(message)):
        run(path, tmp_path / 'killed', 'resumed', resume=True)


def test_the_previous_checkpoint_survives_a_failed_save(tmp_path, monkeypatch):
    """max_keep_ckpts=1: mmengine removed epoch_1.pth before writing epoch_2.pth, so a save
    that failed (or was killed) left no checkpoint at all."""
    extra = "default_hooks = dict(checkpoint=dict(max_keep_ckpts=1))\n"
    path = tiny_config(tmp_path, 'dino_vit-base-p16_8xb64-amp-coslr-100e_in1k.py',
                       epochs=3, num_images=2, extra=extra)
    real_save, calls = torch.save, []

    def save_failing_the_second_time(obj, f, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, 'No space left on device')
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, 'save', save_failing_the_second_time)
    with pytest.raises(OSError, match='No space left'):
        run(path, tmp_path / 'work', 'full_disk')
    monkeypatch.setattr(torch, 'save', real_save)
    assert sorted(p.name for p in (tmp_path / 'work').glob('*.pth')) == ['epoch_1.pth']
    assert torch.load(str(tmp_path / 'work' / 'epoch_1.pth'), map_location='cpu')[
        'meta']['epoch'] == 1
    # and once saves work again, only the newest one is kept
    resumed, _ = run(path, tmp_path / 'work', 'resumed', resume=True)
    assert sorted(p.name for p in (tmp_path / 'work').glob('*.pth')) == ['epoch_3.pth']


@pytest.mark.slow
def test_two_process_ddp_run_saves_checkpoint(tmp_path):
    # one dataloader worker per process: seed_worker_from_loader reads the rank in a worker
    path = tiny_config(tmp_path, 'dino_dinovim-tiny-p16_8xb64-amp-coslr-100e_in1k.py',
                       epochs=2, num_images=4, workers=1)
    work = tmp_path / 'ddp'
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get('PYTHONPATH', '')]))
    proc = subprocess.run(
        [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2',
         '--master_port', '29531', osp.join(ROOT, 'tools', 'train.py'), str(path),
         '--launcher', 'pytorch', '--work-dir', str(work)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    state = torch.load(str(work / 'epoch_2.pth'), map_location='cpu')['state_dict']
    assert any(k.startswith('teacher.backbone.') for k in state)
    assert not any(k.startswith('module.') for k in state)
    assert state['head.center'].abs().sum() > 0


class NaNPixel(Hook):
    """One NaN pixel in the first (teacher) crop of one sample at iteration ``iteration``."""
    priority = 'LOWEST'

    def __init__(self, iteration):
        self.iteration = iteration
        self.runner = None

    def before_run(self, runner):
        self.runner = runner
        runner.model.data_preprocessor.register_forward_hook(self._poison)

    def _poison(self, module, args, output):
        if self.runner.iter == self.iteration:
            output['inputs'][0][1, 0, 5, 5] = float('nan')
        return output


def _non_finite_keys(state):
    return [k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all()]


def test_one_nan_pixel_costs_one_step_not_the_run(tmp_path):
    """A NaN pixel in one crop made the loss NaN and head.center NaN for the rest of the run;
    now that step is skipped and the run goes on with every tensor finite."""
    path = tiny_config(tmp_path, 'dino_dinovim-base-p16_8xb64-amp-coslr-100e_in1k.py',
                       epochs=2, num_images=4, checkpoint_interval=2)
    runner, losses = run(path, tmp_path / 'work', 'nan', extra_hooks=[NaNPixel(1)])
    assert runner.iter == 4 and len(losses) == 4
    assert np.isnan(losses[1]) and np.isfinite([losses[0], *losses[2:]]).all()
    assert _non_finite_keys(runner.model.state_dict()) == []
    state = torch.load(str(tmp_path / 'work' / 'epoch_2.pth'), map_location='cpu')['state_dict']
    assert _non_finite_keys(state) == []
    assert state['head.center'].abs().sum() > 0


def test_a_diverging_learning_rate_stops_the_run_with_every_checkpoint_finite(tmp_path):
    """lr 1e38: the run used to exit 0 with nearly every checkpoint tensor non-finite."""
    path = tiny_config(tmp_path, 'dino_dinovim-base-p16_8xb64-amp-coslr-100e_in1k.py',
                       epochs=4, num_images=4, checkpoint_interval=1,
                       extra="optim_wrapper['optimizer']['lr'] = 1e38\n")
    with pytest.raises(FloatingPointError, match=r'^iteration \d+ of 8: '):
        run(path, tmp_path / 'work', 'diverging')
    saved = sorted(p.name for p in (tmp_path / 'work').glob('*.pth'))
    for name in saved:
        state = torch.load(str(tmp_path / 'work' / name), map_location='cpu')['state_dict']
        assert _non_finite_keys(state) == [], name
