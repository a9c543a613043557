"""tools/benchmarks/ssd_gpu_check.py: the CPU rehearsal of its DINO and UperNet steps, and the
probe that judges them (losses finite, the teacher moved by exactly the EMA step)."""
import copy
import os
import os.path as osp
import subprocess
import sys
from types import SimpleNamespace

import torch
from torch import nn

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(REPO, 'tests'))
from helpers.tools import load_tool  # noqa: E402

gpu_check = load_tool('tools/benchmarks/ssd_gpu_check.py')


def test_cpu_rehearsal_runs_both_training_steps():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get('PYTHONPATH', '')]))
    done = subprocess.run([sys.executable, 'tools/benchmarks/ssd_gpu_check.py', '--device', 'cpu',
                           '--tiny'], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert out.count('teacher moved') == 2 and out.count('decode.loss_ce') == 2, out
    assert 'summary: ssd SKIP, dino PASS, upernet PASS' in out, out


def fake_runner(momentum: float, nan_loss: bool = False):
    """A DINO-shaped model (student / teacher backbone and neck, momentum buffer) in a runner."""
    model = nn.Module()
    model.backbone, model.neck = nn.Linear(3, 2), nn.Linear(2, 2)
    model.teacher = nn.ModuleDict(dict(backbone=copy.deepcopy(model.backbone),
                                       neck=copy.deepcopy(model.neck)))
    model.register_buffer('momentum', torch.tensor(momentum))
    loss = torch.tensor(float('nan') if nan_loss else 2.5)
    return SimpleNamespace(model=model, iter=0), {'loss': loss}


def run_probe(runner, outputs, teacher_update):
    probe = gpu_check.TrainProbe()
    probe.before_train_iter(runner, 0)
    with torch.no_grad():
        for p in [*runner.model.backbone.parameters(), *runner.model.neck.parameters()]:
            p.add_(1e-3)  # the optimizer step
        teacher_update(runner.model)
    probe.after_train_iter(runner, 0, outputs=outputs)
    return probe.ok


def ema(m):
    """The EMA step written out: teacher <- m teacher + (1 - m) student."""
    def update(model):
        for name in ('backbone', 'neck'):
            for t, s in zip(model.teacher[name].parameters(), getattr(model, name).parameters()):
                t.copy_(m * t + (1 - m) * s)
    return update


def test_probe_accepts_the_ema_step_and_rejects_others():
    assert run_probe(*fake_runner(0.996), ema(0.996))
    assert not run_probe(*fake_runner(0.996), lambda model: None)  # teacher frozen
    assert not run_probe(*fake_runner(0.996), ema(0.99))  # another momentum than recorded
    assert not run_probe(*fake_runner(0.996, nan_loss=True), ema(0.996))


def test_upernet_step_skips_without_mmcv_ops(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, 'mmcv.ops', None)  # as with mmcv-lite: import fails
    assert gpu_check.check_training('upernet', True, 2, 2, str(tmp_path)) == 'SKIP'
    assert "mmseg needs mmcv's compiled ops" in capsys.readouterr().out
