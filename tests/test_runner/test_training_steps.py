"""A few iterations of the DinoVim-S DINO and UperNet configs through tools/train.py's config
handling and mmengine's Runner, on synthetic data: every loss finite and the DINO teacher moved by
exactly its EMA step.

'tiny' (the default run): 48 / 64 px, batch 2, 2 iterations, float32 without an accelerator (the
configs' bf16 AMP falls back). 'full' (``pytest -m gpu``, on a CUDA machine; part d of
tools/benchmarks/gpu_check.py): the configs' sizes, batch 32 / 4, 4 iterations, bf16 AMP.
"""
import copy
import math
import os.path as osp
import sys
from types import SimpleNamespace

import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.runner import Runner
from torch import nn

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(ROOT, 'tests'))
from helpers.tools import load_tool  # noqa: E402

CONFIGS = {  # step: (config, synthetic layout)
    'dino': ('configs/dino/dino_dinovim-small-p16_8xb64-amp-coslr-100e_in1k.py', 'cls'),
    'upernet': ('configs/ade20k/upernet_dinovim-small-p16_paper-teacher_8xb2-amp-160k_'
                'ade20k-512x512.py', 'ade'),
}
GPU = [pytest.mark.gpu,
       pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device')]


def train_options(step: str, data_root: str, batch: int, iters: int, tiny: bool) -> list:
    """tools/train.py's ``--cfg-options`` for a short run, nothing saved or loaded; DINO at a
    constant lr 5e-4 (the recipe warms up from 1e-9, under which the teacher's EMA step is below
    float32 resolution), for one epoch of ``batch * iters`` images."""
    loader = 'train_dataloader.dataset.'
    common = [f'{loader}data_root={data_root}', f'train_dataloader.batch_size={batch}',
              f'train_dataloader.num_workers={0 if tiny else 8}', 'log_level=WARNING',
              'default_hooks.checkpoint=None']
    if step == 'dino':
        return common + ['train_cfg.max_epochs=1', 'param_scheduler=[]',
                         'auto_scale_lr.enable=False'] + [
            f'{loader}pipeline.1.{k}' for k in ('global_crop_size=48', 'local_crop_size=32',
                                                'num_local_crops=2') if tiny]
    return common + [f'train_cfg.max_iters={iters}', 'model.backbone.init_cfg=None'] + [
        f'{loader}pipeline.2.scale="(256,64)"', f'{loader}pipeline.3.crop_size="(64,64)"',
        'model.data_preprocessor.size="(64,64)"', 'model.backbone.img_size=64'] * tiny


class TrainProbe(Hook):
    """Records the iterations whose losses are not all finite or, for DINO, whose teacher did not
    move by ``m * teacher_before + (1 - m) * student`` (``m`` the momentum of the EMA step)."""
    priority = 'LOWEST'  # after DINOTeacherEMAHook

    def __init__(self):
        self.failures, self.iterations = [], 0

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        model = getattr(runner.model, 'module', runner.model)
        self.before = [p.detach().clone() for p in model.teacher.parameters()] if hasattr(
            model, 'teacher') else None

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        self.iterations += 1
        losses = {k: float(torch.as_tensor(v).detach()) for k, v in outputs.items() if 'loss' in k}
        row = f'iter {runner.iter + 1}: {losses}'
        ok = bool(losses) and all(map(math.isfinite, losses.values()))
        if self.before is not None:
            model = getattr(runner.model, 'module', runner.model)
            m, teacher = float(model.momentum), list(model.teacher.parameters())
            student = [*model.backbone.parameters(), *model.neck.parameters()]  # teacher's order
            moved = max((t - b).abs().max().item()
                        for t, b in zip(teacher, self.before, strict=True))
            # float32 rounding: 4 ulps of the weights, 1e-3 of the step (m is stored in fp32)
            off = max(((t.double() - m * b.double() - (1 - m) * s.double()).abs().max() / (
                4 * torch.finfo(t.dtype).eps * b.abs().max() + 1e-3 * (t - b).abs().max())).item()
                for t, b, s in zip(teacher, self.before, student, strict=True))
            ok &= 0 < moved and off <= 1
            row += f'; teacher moved {moved:.1e}, off the EMA (m {m:.6f}) by {off:.2f} x tol'
        if not ok:
            self.failures.append(row)


@pytest.mark.parametrize('size', ['tiny', pytest.param('full', marks=GPU)])
@pytest.mark.parametrize('step', ['dino', 'upernet'])
def test_a_few_iterations_train(step, size, tmp_path, plain_config_text):
    if step == 'upernet':
        pytest.importorskip('mmcv.ops', reason='mmseg imports mmcv\'s compiled ops')
    tiny = size == 'tiny'
    iters, batch = (2, 2) if tiny else (4, {'dino': 32, 'upernet': 4}[step])
    config, layout = CONFIGS[step]
    data = str(tmp_path / 'data')
    load_tool('tools/data/make_synthetic.py').make_synthetic(
        data, num_train=batch * iters, num_val=1, size=64 if tiny else 224,
        seg_size=64 if tiny else 256, layouts=(layout, ))
    train = load_tool('tools/train.py')
    argv = [osp.join(ROOT, config), '--work-dir', str(tmp_path / step), '--no-validate',
            *(['--no-persistent-workers'] if tiny else []),
            '--cfg-options', *train_options(step, osp.join(data, layout), batch, iters, tiny)]
    runner = Runner.from_cfg(train.merge_args(Config.fromfile(argv[0]), train.parse_args(argv)))
    probe = TrainProbe()
    runner.register_hook(probe)
    runner.train()
    assert probe.iterations == runner.iter == iters and not probe.failures, probe.failures


def fake_runner(momentum: float, nan_loss: bool = False):
    """A DINO-shaped model (student / teacher backbone and neck, momentum buffer) in a runner."""
    model = nn.Module()
    model.backbone, model.neck = nn.Linear(3, 2), nn.Linear(2, 2)
    model.teacher = nn.ModuleDict(dict(backbone=copy.deepcopy(model.backbone),
                                       neck=copy.deepcopy(model.neck)))
    model.register_buffer('momentum', torch.tensor(momentum))
    loss = torch.tensor(float('nan') if nan_loss else 2.5)
    return SimpleNamespace(model=model, iter=0), {'loss': loss}


def probe_failures(runner, outputs, teacher_update):
    probe = TrainProbe()
    probe.before_train_iter(runner, 0)
    with torch.no_grad():
        for p in [*runner.model.backbone.parameters(), *runner.model.neck.parameters()]:
            p.add_(1e-3)  # the optimizer step
        teacher_update(runner.model)
    probe.after_train_iter(runner, 0, outputs=outputs)
    return probe.failures


def ema(m):
    """The EMA step written out: teacher <- m teacher + (1 - m) student."""
    def update(model):
        for name in ('backbone', 'neck'):
            for t, s in zip(model.teacher[name].parameters(), getattr(model, name).parameters()):
                t.copy_(m * t + (1 - m) * s)
    return update


def test_probe_accepts_the_ema_step_and_rejects_others():
    assert not probe_failures(*fake_runner(0.996), ema(0.996))
    assert probe_failures(*fake_runner(0.996), lambda model: None)  # teacher frozen
    assert probe_failures(*fake_runner(0.996), ema(0.99))  # another momentum than recorded
    assert probe_failures(*fake_runner(0.996, nan_loss=True), ema(0.996))
