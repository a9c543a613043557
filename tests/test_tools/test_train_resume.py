"""tools/train.py and tools/test.py through mmengine's Runner on torch >= 2.6.

A job killed (SIGKILL) after its iteration-4 checkpoint and restarted with --resume ends with
exactly the weights and optimizer state of an uninterrupted run: the oracle is the uninterrupted
run, the code under test is checkpoint save / load / resume (dinomamba_mm.compat).
"""
import json
import os
import os.path as osp
import shutil
import signal
import socket
import subprocess
import sys
import textwrap

import pytest
import torch

import dinomamba_mm  # noqa: F401  (allow-lists what mmengine checkpoints hold)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(ROOT, 'tests'))
from helpers.tiny_cls_data import write_tiny_cls_dataset  # noqa: E402

CONFIG = '''
custom_imports = dict(imports=['dinomamba_mm', 'helpers.kill_hook'],
                      allow_failed_imports=False)
default_scope = 'mmpretrain'
model = dict(
    type='ImageClassifier',
    backbone=dict(type='LeNet5', num_classes=2),
    head=dict(type='ClsHead', loss=dict(type='CrossEntropyLoss')))
data_preprocessor = dict(num_classes=2, mean=[127.5], std=[127.5])
pipeline = [dict(type='LoadImageFromFile', color_type='grayscale'),
            dict(type='RandomFlip', prob=0.5),
            dict(type='PackInputs')]
train_dataloader = dict(
    batch_size=2, num_workers=0,
    dataset=dict(type='CustomDataset', data_root='{data}', ann_file='ann.txt',
                 data_prefix='', with_label=True, pipeline=pipeline),
    sampler=dict(type='DefaultSampler', shuffle=True))
test_dataloader = dict(
    batch_size=4, num_workers=0,
    dataset=dict(type='CustomDataset', data_root='{data}', ann_file='ann.txt',
                 data_prefix='', with_label=True,
                 pipeline=[dict(type='LoadImageFromFile', color_type='grayscale'),
                           dict(type='PackInputs')]),
    sampler=dict(type='DefaultSampler', shuffle=False))
test_evaluator = dict(type='Accuracy', topk=(1, ))
test_cfg = dict()
train_cfg = dict(by_epoch=False, max_iters=6)
optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.05, momentum=0.9))
param_scheduler = [dict(type='LinearLR', start_factor=0.1, by_epoch=False,
                        begin=0, end=3),
                   dict(type='CosineAnnealingLR', by_epoch=False, begin=3, end=6)]
default_hooks = dict(
    checkpoint=dict(type='CheckpointHook', interval=2, by_epoch=False),
    logger=dict(type='LoggerHook', interval=1))
env_cfg = dict(dist_cfg=dict(backend='gloo'))
model_wrapper_cfg = dict(type='MMDistributedDataParallel', device_ids=None)  # CPU processes
randomness = dict(seed=0, deterministic=False)
'''


def run_tool(args, env_extra=None, check=True):
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(
        [osp.join(ROOT, 'tests'), ROOT, env.get('PYTHONPATH', '')])
    env.update(env_extra or {})
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False,
                          timeout=600)


@pytest.fixture(scope='module')
def config(tmp_path_factory):
    root = tmp_path_factory.mktemp('resume')
    data = write_tiny_cls_dataset(str(root / 'data'))
    path = root / 'config.py'
    path.write_text(CONFIG.replace('{data}', data))
    (root / 'config_killed.py').write_text(
        "_base_ = ['./config.py']\n"
        "custom_hooks = [dict(type='KillAfterIterHook', kill_after=5)]\n")
    (root / 'config_epochs.py').write_text(
        "_base_ = ['./config.py']\n"
        "train_cfg = dict(_delete_=True, by_epoch=True, max_epochs=2)\n"
        "param_scheduler = []\n"
        "default_hooks = dict(checkpoint=dict(\n"
        "    _delete_=True, type='dinomamba_mm.ResumableCheckpointHook', interval=1))\n")
    return str(path)


def variant(config, name):
    return config.replace('config.py', f'config_{name}.py')


@pytest.fixture(scope='module')
def trained(config, tmp_path_factory):
    """A finished run of `config` (iter_2 / iter_4 / iter_6.pth and last_checkpoint)."""
    work_dir = str(tmp_path_factory.mktemp('trained') / 'work')
    done = run_tool(['tools/train.py', config, '--work-dir', work_dir])
    assert done.returncode == 0, done.stderr[-3000:]
    return work_dir


def final_state(work_dir):
    ckpt = torch.load(osp.join(work_dir, 'iter_6.pth'), weights_only=True)
    return ckpt['state_dict'], ckpt['optimizer']['state']


def test_killed_training_resumes_with_nothing_lost(config, trained, tmp_path):
    full = trained
    killed = str(tmp_path / 'killed')
    proc = run_tool(['tools/train.py', variant(config, 'killed'), '--work-dir', killed])
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert osp.isfile(osp.join(killed, 'iter_4.pth'))
    assert not osp.exists(osp.join(killed, 'iter_6.pth'))

    resumed = run_tool(['tools/train.py', config, '--work-dir', killed, '--resume'])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert 'resumed epoch: 0, iter: 4' in resumed.stdout + resumed.stderr

    full_weights, full_optim = final_state(full)
    resumed_weights, resumed_optim = final_state(killed)
    assert full_weights.keys() == resumed_weights.keys()
    for key in full_weights:
        torch.testing.assert_close(resumed_weights[key], full_weights[key],
                                   rtol=0, atol=0, msg=key)
    for index, state in full_optim.items():
        torch.testing.assert_close(resumed_optim[index]['momentum_buffer'],
                                   state['momentum_buffer'], rtol=0, atol=0)

    # tools/test.py loads the final checkpoint and evaluates; --out dumps predictions.
    out = str(tmp_path / 'preds.pkl')
    tested = run_tool(['tools/test.py', config, osp.join(full, 'iter_6.pth'),
                       '--work-dir', str(tmp_path / 'test'), '--out', out])
    assert tested.returncode == 0, tested.stderr[-3000:]
    assert 'accuracy/top1' in tested.stdout + tested.stderr
    assert osp.isfile(out)
    # mmpretrain's options: the metrics to a json file, with flip TTA, pin_memory off
    metrics_file = str(tmp_path / 'metrics.json')
    tested = run_tool(['tools/test.py', config, osp.join(full, 'iter_6.pth'),
                       '--work-dir', str(tmp_path / 'test_tta'), '--out', metrics_file,
                       '--out-item', 'metrics', '--tta', '--no-pin-memory'])
    assert tested.returncode == 0, tested.stderr[-3000:]
    with open(metrics_file) as f:
        assert 0 <= json.load(f)['accuracy/top1'] <= 100


def test_resume_from_a_missing_checkpoint_names_it(config, tmp_path):
    missing = str(tmp_path / 'nope.pth')
    proc = run_tool(['tools/train.py', config, '--resume', missing])
    assert proc.returncode != 0
    assert missing in proc.stderr


@pytest.mark.slow
def test_dist_train_two_cpu_processes(config, tmp_path):
    """tools/dist_train.sh with 2 processes on a machine without CUDA (gloo)."""
    work_dir = str(tmp_path / 'dist')
    proc = subprocess.run(
        ['bash', 'tools/dist_train.sh', config, '2', '--work-dir', work_dir],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, 'PORT': '29631',
             'PYTHONPATH': osp.join(ROOT, 'tests'),
             'PATH': osp.dirname(sys.executable) + os.pathsep + os.environ['PATH']})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert osp.isfile(osp.join(work_dir, 'iter_6.pth'))


def test_wrong_dataset_root_names_the_paths_and_the_layout(config, tmp_path):
    wrong = str(tmp_path / 'no_such_dataset')
    proc = run_tool(['tools/train.py', config, '--work-dir', str(tmp_path / 'w'),
                     '--cfg-options', f'train_dataloader.dataset.data_root={wrong}'])
    assert proc.returncode != 0
    assert 'FileNotFoundError' in proc.stderr
    assert f"'{wrong}'" in proc.stderr and 'ann.txt' in proc.stderr
    assert 'train_dataloader.dataset (CustomDataset)' in proc.stderr
    assert '"path label" lines' in proc.stderr


def _merged_resume(config, work_dir, capsys):
    """tools/train.py's merge_args for `--resume` (no value), and the lines it logged."""
    from mmengine.config import Config
    from mmengine.logging import MMLogger

    from helpers.tools import load_tool
    tool = load_tool('tools/train.py')
    # a fresh current logger, writing to the stdout capsys captures now
    MMLogger.get_instance(f'resume_test_{work_dir}')
    args = tool.parse_args([config, '--work-dir', str(work_dir), '--resume'])
    cfg = tool.merge_args(Config.fromfile(config), args)
    return cfg, [line.split(' - ', 2)[-1] for line in capsys.readouterr().out.splitlines()]


def test_resume_with_nothing_to_resume_says_so(config, tmp_path, capsys):
    """mmengine logged 'Auto resumed from the latest checkpoint None' and trained from
    scratch."""
    cfg, logged = _merged_resume(config, tmp_path / 'empty', capsys)
    assert cfg.resume is False and cfg.load_from is None
    assert logged == [f'WARNING - --resume: nothing to resume in {tmp_path / "empty"} (no '
                      'last_checkpoint file naming an intact checkpoint, no intact *.pth): '
                      'training from scratch']


def test_resume_falls_back_from_a_truncated_last_checkpoint(config, tmp_path, capsys):
    """A last_checkpoint whose file was cut short failed to load, with no fallback."""
    work = tmp_path / 'work'
    work.mkdir()
    torch.save({'state_dict': {}, 'meta': {'iter': 2}}, str(work / 'iter_2.pth'))
    data = (work / 'iter_2.pth').read_bytes()
    (work / 'iter_4.pth').write_bytes(data[:len(data) // 2])
    os.utime(work / 'iter_2.pth', (1, 1))  # older
    (work / 'last_checkpoint').write_text(str(work / 'iter_4.pth'))
    cfg, logged = _merged_resume(config, work, capsys)
    assert cfg.resume is True and cfg.load_from == str(work / 'iter_2.pth')
    assert 'is truncated' in logged[0] and f'resuming from {work / "iter_2.pth"}' in logged[0]
    assert logged[1] == f'INFO - --resume: resuming from {work / "iter_2.pth"}'


def _checkpoint_stamps(work_dir):
    return {name: (os.stat(osp.join(work_dir, name)).st_mtime_ns,
                   open(osp.join(work_dir, name), 'rb').read())
            for name in sorted(os.listdir(work_dir)) if name.endswith('.pth')}


def test_resume_after_the_work_dir_was_moved_takes_its_own_checkpoint(config, trained,
                                                                     tmp_path):
    """last_checkpoint still named the old place: the run trained from scratch, overwriting
    the intact iter_2 / iter_4 / iter_6.pth of the moved dir."""
    shutil.copytree(trained, str(tmp_path / 'a'))  # copy2: the mtimes of the run
    (tmp_path / 'a' / 'last_checkpoint').write_text(str(tmp_path / 'a' / 'iter_6.pth'))
    moved = str(tmp_path / 'b')
    os.rename(str(tmp_path / 'a'), moved)
    before = _checkpoint_stamps(moved)
    proc = run_tool(['tools/train.py', config, '--work-dir', moved, '--resume'])
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert (f'{moved}/last_checkpoint names {tmp_path}/a/iter_6.pth, which is not in {moved} '
            f'(the work dir was moved or copied); resuming from {moved}/iter_6.pth') in output
    assert 'resumed epoch: 0, iter: 6' in output
    assert _checkpoint_stamps(moved) == before


def _saved(path, iteration):
    torch.save({'state_dict': {}, 'meta': {'iter': iteration}}, str(path))
    return str(path)


def test_resume_of_a_copied_work_dir_takes_the_copy_not_the_original(config, tmp_path, capsys):
    """It silently resumed from the original dir's file."""
    original = tmp_path / 'original'
    original.mkdir()
    _saved(original / 'iter_2.pth', 2)
    _saved(original / 'iter_4.pth', 4)
    (original / 'last_checkpoint').write_text(str(original / 'iter_4.pth'))
    copy = tmp_path / 'copy'
    shutil.copytree(str(original), str(copy), copy_function=shutil.copy)  # fresh mtimes
    cfg, logged = _merged_resume(config, copy, capsys)
    assert cfg.resume is True and cfg.load_from == str(copy / 'iter_4.pth')
    assert logged[0] == (
        f'WARNING - {copy / "last_checkpoint"} names {original / "iter_4.pth"}, which is not '
        f'in {copy} (the work dir was moved or copied); resuming from {copy / "iter_4.pth"}, '
        'the file of that name in the work dir')


@pytest.mark.parametrize('garbage', [b'\x00\xff\x13\x80garbage', b'nonsense',
                                     b'/no/such/dir/iter_9.pth'])
def test_resume_with_garbage_in_last_checkpoint_takes_the_newest_of_the_work_dir(
        config, tmp_path, capsys, garbage):
    """Binary garbage failed to decode; a bare name made it search the current directory;
    a path elsewhere made it search there: each time it trained from scratch."""
    work = tmp_path / 'work'
    work.mkdir()
    older, newer = _saved(work / 'iter_2.pth', 2), _saved(work / 'iter_4.pth', 4)
    os.utime(older, (1, 1))
    (work / 'last_checkpoint').write_bytes(garbage)
    cfg, logged = _merged_resume(config, work, capsys)
    assert cfg.resume is True and cfg.load_from == newer
    assert f'resuming from {newer} instead, the most recently written intact checkpoint' \
        in logged[0]


def test_a_second_run_in_the_same_work_dir_is_refused_and_a_killed_one_frees_it(
        config, tmp_path):
    """Both runs exited 0, the second one's checkpoints replacing the first's."""
    work = str(tmp_path / 'work')
    stopped_config = tmp_path / 'config_stopped.py'
    stopped_config.write_text(
        f"_base_ = ['{config}']\n"
        "custom_hooks = [dict(type='KillAfterIterHook', kill_after=1, signal_name='SIGSTOP')]\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([osp.join(ROOT, 'tests'), ROOT]))
    with open(tmp_path / 'first.log', 'w') as log:
        first = subprocess.Popen([sys.executable, 'tools/train.py', str(stopped_config),
                                  '--work-dir', work], cwd=ROOT, env=env, stdout=log,
                                 stderr=subprocess.STDOUT)
    try:
        _, status = os.waitpid(first.pid, os.WUNTRACED)  # returns once it stops itself
        assert os.WIFSTOPPED(status), open(tmp_path / 'first.log').read()[-3000:]
        second = run_tool(['tools/train.py', config, '--work-dir', work])
        assert second.returncode != 0
        assert (f'{work} is in use by another training run: pid {first.pid} on '
                f'{socket.gethostname()}') in second.stderr
        assert 'config_stopped.py' in second.stderr  # its command line
    finally:
        first.kill()
        first.wait()
    from dinomamba_mm.engine.safeguards import lock_work_dir
    with lock_work_dir(work):  # the killed run left nothing stuck
        pass


def test_zero_epochs_is_an_error_naming_the_field(config, tmp_path):
    """train_cfg.max_epochs=0 exited 0 with nothing trained and no message."""
    from helpers.tools import load_tool
    tool = load_tool('tools/train.py')
    for path, key in ((variant(config, 'epochs'), 'max_epochs'), (config, 'max_iters')):
        with pytest.raises(ValueError, match=f'^train_cfg.{key} must be an int >= 1, got 0'):
            tool.main([path, '--work-dir', str(tmp_path / key),
                       '--cfg-options', f'train_cfg.{key}=0'])
        assert not osp.exists(tmp_path / key)


def test_a_misspelt_top_level_key_is_named(config, tmp_path, capsys):
    """--cfg-options trian_cfg.max_epochs=1 was ignored without a word."""
    from mmengine.config import Config
    from mmengine.logging import MMLogger

    from helpers.tools import load_tool
    tool = load_tool('tools/train.py')
    MMLogger.get_instance('misspelt_key_test')
    args = tool.parse_args([config, '--work-dir', str(tmp_path), '--cfg-options',
                            'trian_cfg.max_epochs=1', 'train_cfg.max_iters=4',
                            'data_preprocessor.num_classes=2'])
    tool.merge_args(Config.fromfile(config), args)
    logged = [line.split(' - ', 2)[-1] for line in capsys.readouterr().out.splitlines()]
    assert logged == [
        "WARNING - --cfg-options trian_cfg.max_epochs=1: no part of mmengine's Runner or of "
        "this config reads a top-level key 'trian_cfg', so it changes nothing "
        "(did you mean 'train_cfg'?)"]


def test_resuming_with_another_batch_size_names_it(config, tmp_path):
    """It said 'Resume from epoch_2.pth' while the file resumed was epoch_2.pth."""
    work = str(tmp_path / 'work')
    done = run_tool(['tools/train.py', variant(config, 'epochs'), '--work-dir', work])
    assert done.returncode == 0, done.stderr[-3000:]
    proc = run_tool(['tools/train.py', variant(config, 'epochs'), '--work-dir', work,
                     '--resume', '--cfg-options', 'train_dataloader.batch_size=4',
                     'train_cfg.max_epochs=3'])
    assert proc.returncode != 0
    assert ('cannot resume from epoch_2.pth (epoch 2, iteration 8): it was saved with 4 '
            'iterations per epoch, this run has 2 (8 samples, batch size 4 per process, 1 '
            'process(es)): the batch size, the dataset or the number of processes changed'
            ) in proc.stderr
    assert 'Resume from epoch_2.pth' not in proc.stderr


@pytest.mark.slow
def test_a_stopped_rank_times_out_naming_it(config, tmp_path):
    """A rank stopped (kill -STOP) left the other waiting for gloo's 30 min default."""
    hung = tmp_path / 'config_hung.py'
    hung.write_text(
        f"_base_ = ['{config}']\n"
        "custom_hooks = [dict(type='KillAfterIterHook', kill_after=2, signal_name='SIGSTOP',"
        " rank=1)]\n"
        "env_cfg = dict(dist_cfg=dict(timeout=10))\n")
    proc = subprocess.run(
        ['bash', 'tools/dist_train.sh', str(hung), '2', '--work-dir', str(tmp_path / 'w')],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, 'PORT': '29633', 'PYTHONPATH': osp.join(ROOT, 'tests'),
             'PATH': osp.dirname(sys.executable) + os.pathsep + os.environ['PATH']})
    assert proc.returncode != 0
    assert ('a process of the run stopped answering: no reply within 10 s '
            '(env_cfg.dist_cfg.timeout)') in proc.stderr, proc.stderr[-3000:]
