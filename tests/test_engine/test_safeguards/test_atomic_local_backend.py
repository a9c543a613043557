"""Checkpoints written through the configs' CheckpointHook are whole or absent.

A save that fails halfway is made real with RLIMIT_FSIZE (the kernel refuses to grow the file
past the limit, as a full disk does); killed by the resulting SIGXFSZ, it is a save killed
halfway. The oracle: the file under the checkpoint's name afterwards is the previous one, byte
for byte (or there is none).
"""
import os
import os.path as osp
import signal
import subprocess
import sys
import textwrap

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import HOOKS
from mmengine.runner.checkpoint import save_checkpoint

import dinomamba_mm  # noqa: F401
from dinomamba_mm.checkpoints import checkpoint_file_problem
from dinomamba_mm.engine.safeguards import AtomicLocalBackend

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
RUNTIMES = ['configs/_base_/schedules/dino_adamw_coslr_100e.py',
            'configs/_base_/schedules/sgd_coslr_100e_linear-probe.py',
            'configs/_base_/schedules/schedule_ade20k_160k.py',
            'configs/_base_/schedules/schedule_coco_lsj_100e.py']
BIG = {'state_dict': {'w': torch.arange(1 << 20, dtype=torch.float32)}}  # 4 MiB


def hook_backend_args(runtime):
    hook = HOOKS.build(Config.fromfile(osp.join(ROOT, runtime)).default_hooks.checkpoint)
    return hook.backend_args


def test_put_replaces_the_file_whole(tmp_path):
    backend = AtomicLocalBackend()
    target = str(tmp_path / 'sub' / 'epoch_1.pth')
    backend.put(b'first', target)
    backend.put(b'second', target)
    backend.put_text('text', str(tmp_path / 'last_checkpoint'))
    assert open(target, 'rb').read() == b'second'
    assert sorted(os.listdir(tmp_path / 'sub')) == ['epoch_1.pth']
    assert (tmp_path / 'last_checkpoint').read_text() == 'text'


@pytest.mark.parametrize('runtime', RUNTIMES)
def test_a_save_failing_halfway_leaves_the_previous_checkpoint(tmp_path, runtime):
    """Out of space at 1 MiB of a 4 MiB checkpoint: mmengine's LocalBackend left a 1 MiB file
    that --resume would pick."""
    target = str(tmp_path / 'epoch_1.pth')
    save_checkpoint({'state_dict': {'w': torch.ones(3)}}, target)
    before = open(target, 'rb').read()
    backend_args = hook_backend_args(runtime)
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an OSError, not a kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, hard))
    try:
        with pytest.raises(OSError):
            save_checkpoint(BIG, target, backend_args=backend_args)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)
    assert open(target, 'rb').read() == before
    assert os.listdir(tmp_path) == ['epoch_1.pth']  # the partial file is removed


@pytest.mark.slow
@pytest.mark.parametrize('runtime', RUNTIMES)
def test_a_save_killed_halfway_leaves_no_partial_checkpoint(tmp_path, runtime):
    script = textwrap.dedent(f'''
        import resource, signal, torch
        from mmengine.runner.checkpoint import save_checkpoint
        import dinomamba_mm
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it: be killed instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))
        save_checkpoint({{'w': torch.arange(1 << 20, dtype=torch.float32)}},
                        {str(tmp_path / 'epoch_2.pth')!r},
                        backend_args={hook_backend_args(runtime)!r})
    ''')
    proc = subprocess.run([sys.executable, '-c', script], cwd=ROOT, capture_output=True,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=300)
    assert proc.returncode == -signal.SIGXFSZ, proc.stderr.decode()[-2000:]
    target = tmp_path / 'epoch_2.pth'
    assert not target.exists(), checkpoint_file_problem(str(target))
    assert os.listdir(tmp_path) == ['.epoch_2.pth.part']  # replaced by the next save of it
