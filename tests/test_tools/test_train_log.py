"""A 2-iteration training log of a config inheriting ours holds no false warning.

mmengine builds the objects of a ``dinomamba_mm::`` base in our scope; in a registry of a scope
in its package map (ours is, for such bases) that has no ``locations``, it looks for
``<scope>.utils.register_all_modules`` and warned that "dinomamba_mm is not installed and its
modules will not be registered".
"""
import os
import os.path as osp
import subprocess
import sys

import numpy as np
from PIL import Image

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))

CHILD = """
_base_ = 'dinomamba_mm::demo/dino_dinovim-demo_synthetic.py'
model = dict(
    backbone=dict(arch=dict(_delete_=True, embed_dims=32, num_layers=2, headdim=16, d_state=8)),
    neck=dict(in_channels=32, out_channels=64, hidden_channels=64, bottleneck_channels=16),
    head=dict(out_channels=64))
train_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    dataset=dict(_delete_=True, type='mmpretrain.CustomDataset', data_root='{data}',
                 with_label=False, pipeline={{{{_base_.train_pipeline}}}}))
train_cfg = dict(max_epochs=1)
default_hooks = dict(logger=dict(interval=1))
"""


def test_a_two_iteration_training_log_has_no_false_warning(tmp_path, mim_links):
    rng = np.random.default_rng(0)
    data = tmp_path / 'images'
    data.mkdir()
    for i in range(4):
        Image.fromarray(rng.integers(0, 256, (48, 48, 3), dtype=np.uint8)).save(
            data / f'{i}.jpg')
    config = tmp_path / 'child.py'
    config.write_text(CHILD.format(data=data))
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in [os.environ.get('PYTHONPATH')] if p]))
    proc = subprocess.run(
        [sys.executable, osp.join(ROOT, 'tools', 'train.py'), str(config), '--work-dir',
         str(tmp_path / 'work')], cwd=str(tmp_path), env=env, capture_output=True, text=True,
        timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    assert 'Epoch(train) [1][2/2]' in log, log[-3000:]
    assert 'is not installed and its modules will not be registered' not in log
    assert 'pkg_resources is deprecated' not in log
