"""The dense configs run through our tools/dist_train.sh (2 CPU processes, gloo) and through the
installed mmseg's and mmdet's own tools/train.py, given nothing but the config file (its
custom_imports registers dinomamba_mm). Slow: each starts fresh interpreters."""
import glob
import os
import os.path as osp
import subprocess
import sys

import mmdet
import mmseg
import pytest
from dense_helpers import REPO, tiny_ade_cfg, tiny_coco_cfg

pytestmark = pytest.mark.slow


def _run(command, cwd) -> None:
    # dist_train.sh calls `python`: the one running the tests
    path = osp.dirname(sys.executable) + os.pathsep + os.environ.get('PATH', '')
    env = dict(os.environ, OMP_NUM_THREADS='1', PATH=path)
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def _last_iteration(work_dir: str) -> int:
    with open(osp.join(work_dir, 'last_checkpoint')) as f:
        checkpoint = f.read().strip()
    return int(osp.basename(checkpoint)[len('iter_'):-len('.pth')])


def test_dist_train_sh_runs_two_gloo_processes(tiny_synthetic, tmp_path):
    work_dir = str(tmp_path / 'work')
    cfg = tiny_ade_cfg(tiny_synthetic, work_dir)
    cfg.log_level = 'INFO'  # the environment summary names the world size
    config = str(tmp_path / 'tiny_ade.py')
    cfg.dump(config)
    _run(['bash', osp.join(REPO, 'tools', 'dist_train.sh'), config, '2',
          '--work-dir', work_dir], cwd=str(tmp_path))
    assert _last_iteration(work_dir) == 2
    (log, ) = glob.glob(osp.join(work_dir, '*', '*.log'))
    with open(log) as f:
        text = f.read()
    assert 'Distributed training: True' in text and 'GPU number: 2' in text


@pytest.mark.parametrize('package,make_cfg', [(mmseg, tiny_ade_cfg), (mmdet, tiny_coco_cfg)],
                         ids=['mmseg', 'mmdet'])
def test_packaged_train_py_needs_only_the_config(package, make_cfg, tiny_synthetic,
                                                 tmp_path):
    train_py = osp.join(osp.dirname(package.__file__), '.mim', 'tools', 'train.py')
    work_dir = str(tmp_path / 'work')
    cfg = make_cfg(tiny_synthetic, work_dir)
    config = str(tmp_path / 'tiny.py')
    cfg.dump(config)
    # a fresh interpreter that never imported dinomamba_mm itself, run outside the repo
    _run([sys.executable, train_py, config, '--work-dir', work_dir], cwd=str(tmp_path))
    assert _last_iteration(work_dir) == 2
