"""tools/train.py stopped by SIGUSR1 / SIGTERM mid-epoch saves a checkpoint of the iteration,
exits with status 75, and --resume continues loss for loss and weight for weight.

The oracle is the uninterrupted run of the same config: per-iteration losses (logged with a
window of 1) and the final weights must be equal, not close. Randomness in the data workers
(seeded each epoch from the main generator), in the main process's pipeline and in the
training step (Mixup) makes any draw out of place show.
"""
import json
import os
import os.path as osp
import signal
import subprocess
import sys

import pytest
import torch

import dinomamba_mm  # noqa: F401  (torch's allow-list for mmengine's classes in checkpoints)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(ROOT, 'tests'))
from helpers.tiny_cls_data import write_tiny_cls_dataset  # noqa: E402
from helpers.tools import load_tool  # noqa: E402

# 8 images, batch 2: 4 iterations per epoch
CONFIG = '''
custom_imports = dict(imports=['dinomamba_mm', 'helpers.kill_hook'],
                      allow_failed_imports=False)
default_scope = 'mmpretrain'
model = dict(
    type='ImageClassifier',
    backbone=dict(type='LeNet5', num_classes=2),
    head=dict(type='ClsHead', loss=dict(type='CrossEntropyLoss', use_soft=True)))
data_preprocessor = dict(num_classes=2, mean=[127.5], std=[127.5],
                         batch_augments=dict(augments=dict(type='Mixup', alpha=0.8)))
train_dataloader = dict(
    batch_size=2, num_workers={workers}, persistent_workers=False,{worker_init_fn}
    dataset=dict(type='CustomDataset', data_root='{data}', ann_file='ann.txt',
                 data_prefix='', with_label=True,
                 pipeline=[dict(type='LoadImageFromFile', color_type='grayscale'),
                           dict(type='RandomFlip', prob=0.5),
                           dict(type='PackInputs')]),
    sampler=dict(type='DefaultSampler', shuffle=True))
train_cfg = dict({train_cfg})
optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.05, momentum=0.9))
param_scheduler = [dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=3)]
default_hooks = dict(
    checkpoint=dict(type='dinomamba_mm.ResumableCheckpointHook', {checkpoint}),
    logger=dict(type='LoggerHook', interval=1))
log_processor = dict(window_size=1)
custom_hooks = [dict(type='dinomamba_mm.RandomStateHook')]
randomness = dict(seed=0)
'''
EPOCHS = dict(workers=1,
              worker_init_fn="\n    worker_init_fn=dict(type='dinomamba_mm.seed_worker_from_loader'),",
              train_cfg='by_epoch=True, max_epochs=2', checkpoint='interval=1', last='epoch_2')
ITERS = dict(workers=0, worker_init_fn='', train_cfg='by_epoch=False, max_iters=6',
             checkpoint='by_epoch=False, interval=2', last='iter_6')


def write_config(root, kind, stop=None, two_processes=False):
    """config.py of ``kind`` and, with ``stop`` = (iteration, signal name[, rank]), also
    config_signalled.py that sends the signal after that iteration (on that rank only)."""
    data = write_tiny_cls_dataset(str(root / 'data'))
    text = CONFIG.replace('{data}', data)
    for key, value in kind.items():
        text = text.replace('{%s}' % key, str(value))
    if two_processes:
        text += ("env_cfg = dict(dist_cfg=dict(backend='gloo'))\n"
                 "model_wrapper_cfg = dict(type='MMDistributedDataParallel', device_ids=None)\n")
    path = root / 'config.py'
    path.write_text(text)
    if stop is None:
        return str(path)
    iteration, name, rank = (*stop, None)[:3]
    signalled = root / 'config_signalled.py'
    signalled.write_text(
        "_base_ = ['./config.py']\n"
        "custom_hooks = [dict(type='dinomamba_mm.RandomStateHook'), dict(type='KillAfterIterHook',"
        f" kill_after={iteration}, signal_name='{name}', rank={rank})]\n")
    return str(path), str(signalled)


def start(config, work_dir, *options, threads=None, **env):
    """tools/train.py with ``options`` in a child process, its output piped. By default it runs
    on as many threads as this process, whose in-process runs are the oracle: the same number
    of threads gives the same bits."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads or torch.get_num_threads()),
               PYTHONPATH=os.pathsep.join(
                   [osp.join(ROOT, 'tests'), ROOT, os.environ.get('PYTHONPATH', '')]), **env)
    return subprocess.Popen([sys.executable, 'tools/train.py', config, '--work-dir', work_dir,
                             *options], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def train_here(config, work_dir, *extra):
    """tools/train.py in this process (no second interpreter to start)."""
    load_tool('tools/train.py').main([config, '--work-dir', work_dir, *extra])


def losses(work_dir):
    """{iteration: loss} of every run logged in work_dir."""
    found = {}
    for run in sorted(os.listdir(work_dir)):
        scalars = osp.join(work_dir, run, 'vis_data', 'scalars.json')
        if osp.isfile(scalars):
            with open(scalars) as f:
                for line in f:
                    entry = json.loads(line)
                    if 'loss' in entry:
                        found[entry['step']] = entry['loss']
    return found


def weights(work_dir, name):
    return torch.load(osp.join(work_dir, f'{name}.pth'), weights_only=True)['state_dict']


def check_resumed_as_uninterrupted(config, full, stopped, last, iterations):
    train_here(config, stopped, '--resume')
    assert losses(stopped) == losses(full)
    assert sorted(losses(full)) == list(range(1, iterations + 1))
    expected, resumed = weights(full, last), weights(stopped, last)
    assert expected.keys() == resumed.keys()
    for key in expected:
        assert torch.equal(resumed[key], expected[key]), key


def test_sigusr1_mid_epoch_saves_the_iteration_and_resume_continues_exactly(tmp_path):
    """SIGUSR1 killed the run: everything since epoch_1.pth was lost."""
    config, signalled = write_config(tmp_path, EPOCHS, stop=(6, 'SIGUSR1'))
    stopped = str(tmp_path / 'stopped')
    proc = start(signalled, stopped)
    full = str(tmp_path / 'full')
    train_here(config, full)
    output = proc.communicate(timeout=300)[0]
    assert proc.returncode == 75, output[-3000:]
    assert (f'SIGUSR1 received: training stopped after iteration 6 of 8, saved in '
            f'{stopped}/iter_6.pth. Continue it with tools/train.py --resume') in output
    checkpoint = torch.load(osp.join(stopped, 'iter_6.pth'), weights_only=True)
    assert checkpoint['meta']['epoch'] == 1 and checkpoint['meta']['iter'] == 6
    assert checkpoint['meta']['preempted_by'] == 'SIGUSR1'
    with open(osp.join(stopped, 'last_checkpoint')) as f:
        assert f.read() == osp.join(stopped, 'iter_6.pth')
    assert not osp.exists(osp.join(stopped, 'epoch_2.pth'))
    check_resumed_as_uninterrupted(config, full, stopped, 'epoch_2', 8)


def test_sigterm_from_outside_saves_the_iteration_and_resume_continues_exactly(tmp_path):
    """The same with SIGTERM sent by another process (the run stops itself after iteration 3,
    so that the signal arrives at a known point), under IterBasedTrainLoop, whose resume draws
    the trained batches again in the main process: the generators were put back before those
    draws, so the resumed augmentations differed."""
    config, signalled = write_config(tmp_path, ITERS, stop=(3, 'SIGSTOP'))
    stopped = str(tmp_path / 'stopped')
    proc = start(signalled, stopped)
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), proc.communicate()[0][-3000:]
    os.kill(proc.pid, signal.SIGTERM)
    os.kill(proc.pid, signal.SIGCONT)
    output = proc.communicate(timeout=300)[0]
    assert proc.returncode == 75, output[-3000:]
    assert 'SIGTERM received: training stopped after iteration 3 of 6' in output
    assert torch.load(osp.join(stopped, 'iter_3.pth'),
                      weights_only=True)['meta']['preempted_by'] == 'SIGTERM'
    full = str(tmp_path / 'full')
    train_here(config, full)
    check_resumed_as_uninterrupted(config, full, stopped, 'iter_6', 6)


def start_two_processes(config, work_dir, port, *options):
    """tools/train.py --launcher pytorch as two CPU processes (gloo, one thread each), as a
    launcher starts them; returns the two Popen objects, rank 0 first."""
    return [start(config, work_dir, '--launcher', 'pytorch', *options, threads=1,
                  RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE='2', LOCAL_WORLD_SIZE='2',
                  MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
            for rank in range(2)]


def finish(procs):
    outputs = [proc.communicate(timeout=300)[0] for proc in procs]
    return [proc.returncode for proc in procs], outputs


@pytest.mark.slow
def test_a_signal_to_one_rank_stops_every_rank_after_the_same_iteration(tmp_path):
    """Two processes, SIGUSR1 to rank 1 only after iteration 3 (IterBasedTrainLoop, 2 images
    per process and iteration): the ranks all-reduce the signal, so both save nothing more,
    stop after iteration 3 with status 75 once rank 0 has written iter_3.pth, and the resumed
    two-process run logs the losses of an uninterrupted two-process run."""
    config, signalled = write_config(tmp_path, ITERS, stop=(3, 'SIGUSR1', 1),
                                     two_processes=True)
    stopped, full = str(tmp_path / 'stopped'), str(tmp_path / 'full')
    codes, outputs = finish(start_two_processes(signalled, stopped, 29541))
    assert codes == [75, 75], '\n'.join(output[-3000:] for output in outputs)
    # mmengine's logger prints on rank 0 only
    assert 'SIGUSR1 received: training stopped after iteration 3 of 6' in outputs[0]
    assert torch.load(osp.join(stopped, 'iter_3.pth'),
                      weights_only=True)['meta']['preempted_by'] == 'SIGUSR1'
    codes, outputs = finish(start_two_processes(config, full, 29542))
    assert codes == [0, 0], '\n'.join(output[-3000:] for output in outputs)
    codes, outputs = finish(start_two_processes(config, stopped, 29543, '--resume'))
    assert codes == [0, 0], '\n'.join(output[-3000:] for output in outputs)
    assert sorted(losses(full)) == list(range(1, 7))
    assert losses(stopped) == losses(full)
    expected, resumed = weights(full, 'iter_6'), weights(stopped, 'iter_6')
    for key in expected:
        assert torch.equal(resumed[key], expected[key]), key
