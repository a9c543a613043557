"""Checkpoint files on disk: told apart before torch.load fails on them with EOFError('') or
KeyError: 101. The oracle is the file written by hand in each case."""
import os
import os.path as osp
import time

import pytest
import torch

import dinomamba_mm  # noqa: F401
from dinomamba_mm.checkpoints import files as files_module
from dinomamba_mm.checkpoints import (check_checkpoint_file, checkpoint_file_problem,
                                      find_resumable_checkpoint)


def write(path, data: bytes):
    with open(path, 'wb') as f:
        f.write(data)
    return str(path)


def saved(path, value=0.):
    torch.save({'state_dict': {'w': torch.full((64, ), value)}, 'meta': {}}, str(path))
    return str(path)


@pytest.mark.parametrize('make, message', [
    (lambda d: write(d / 'a.pth', b''),
     'is empty (0 bytes): the save that wrote it was interrupted, or it is not a checkpoint'),
    (lambda d: write(d / 'a.pth', b'epoch 3, loss 0.1\n'),
     "is not a PyTorch checkpoint but text, starting with 'epoch 3, loss 0.1\\n'"),
    (lambda d: write(d / 'a.pth', b'<!DOCTYPE html><html>404</html>'),
     'is not a PyTorch checkpoint but an HTML page'),
    (lambda d: write(d / 'a.pth', b'version https://git-lfs.github.com/spec/v1\noid sha256:0'),
     'is a Git LFS pointer, not the checkpoint: fetch the file (git lfs pull)'),
    (lambda d: write(d / 'a.pth', b'\x00\xff\x13binary'),
     "is not a PyTorch checkpoint: it starts with the bytes b'\\x00\\xff\\x13binary'"),
])
def test_files_that_are_not_checkpoints_are_named(tmp_path, make, message):
    path = make(tmp_path)
    assert message in checkpoint_file_problem(path)
    with pytest.raises(ValueError) as info:
        check_checkpoint_file(path, 'load_from checkpoint')
    assert str(info.value).startswith(f'load_from checkpoint {path!r} ')
    assert message in str(info.value)


def test_a_truncated_checkpoint_is_named(tmp_path):
    whole = saved(tmp_path / 'whole.pth')
    with open(whole, 'rb') as f:
        data = f.read()
    cut = write(tmp_path / 'cut.pth', data[:len(data) // 2])
    assert checkpoint_file_problem(cut) == (
        f'is truncated ({len(data) // 2} bytes, a zip archive without its central directory): '
        'the save that wrote it was interrupted')


def test_readable_checkpoints_pass(tmp_path):
    assert checkpoint_file_problem(saved(tmp_path / 'zip.pth')) is None
    legacy = str(tmp_path / 'legacy.pth')
    torch.save({'w': torch.zeros(2)}, legacy, _use_new_zipfile_serialization=False)
    assert checkpoint_file_problem(legacy) is None
    check_checkpoint_file('https://example.org/never/read.pth')  # remote: left to its loader


def test_a_missing_file_is_file_not_found(tmp_path):
    missing = str(tmp_path / 'nope.pth')
    with pytest.raises(FileNotFoundError, match=f"^checkpoint '{missing}' does not exist$"):
        check_checkpoint_file(missing)
    with pytest.raises(FileNotFoundError, match=f"^checkpoint '{missing}' does not exist$"):
        check_checkpoint_file(tmp_path / 'nope.pth')  # a pathlib.Path went unchecked
    assert checkpoint_file_problem(str(tmp_path)) == 'is not a file'


@pytest.fixture
def logged(monkeypatch):
    """The messages print_log got (mmengine's logger keeps the stream of the first test)."""
    messages = []
    monkeypatch.setattr(files_module, 'print_log', lambda msg, **kwargs: messages.append(msg))
    return messages


def _age(path, seconds):
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp))


def test_resume_takes_the_checkpoint_last_checkpoint_names(tmp_path):
    older, newer = saved(tmp_path / 'epoch_1.pth'), saved(tmp_path / 'epoch_2.pth')
    _age(older, 20)
    _age(newer, 10)
    (tmp_path / 'last_checkpoint').write_text(older)  # named wins over newest
    assert find_resumable_checkpoint(str(tmp_path)) == older


def test_resume_falls_back_to_the_newest_intact_checkpoint(tmp_path, logged):
    first, second = saved(tmp_path / 'epoch_1.pth'), saved(tmp_path / 'epoch_2.pth')
    third = write(tmp_path / 'epoch_3.pth', open(second, 'rb').read()[:100])  # killed save
    other = saved(tmp_path / 'pretrained.pth')  # newest, intact, but not one of the run's
    for path, age in ((first, 30), (second, 20), (third, 10), (other, 5)):
        _age(path, age)
    (tmp_path / 'last_checkpoint').write_text(third)
    assert find_resumable_checkpoint(str(tmp_path)) == second
    assert len(logged) == 1
    assert f'{third} (named by {tmp_path / "last_checkpoint"}) is truncated' in logged[0]
    assert f'resuming from {second} instead' in logged[0]


def test_resume_with_an_empty_pointer_or_none(tmp_path, logged):
    assert find_resumable_checkpoint(str(tmp_path)) is None  # nothing at all: nothing to say
    assert logged == []
    (tmp_path / 'last_checkpoint').write_text('')
    assert find_resumable_checkpoint(str(tmp_path)) is None
    assert 'last_checkpoint is empty, and no other intact checkpoint matching ' \
           "'(epoch|iter)_\\\\d+\\\\.pth$' was found" in logged.pop()
    only = saved(tmp_path / 'iter_4.pth')
    assert find_resumable_checkpoint(str(tmp_path)) == only
    os.remove(tmp_path / 'last_checkpoint')
    assert find_resumable_checkpoint(str(tmp_path)) == only
    assert f'{tmp_path} has no last_checkpoint file; resuming from {only}' in logged.pop()
    assert not osp.exists(tmp_path / 'last_checkpoint')


def legacy(path, value=0.):
    """torch's legacy (pickle) format: no CRC, storages after the pickles."""
    torch.save({'state_dict': {'w': torch.full((64, ), value), 'b': torch.zeros(3).half()},
                'meta': {'epoch': 3}}, str(path), _use_new_zipfile_serialization=False)
    return str(path)


@pytest.mark.parametrize('cut', [100, 500, -200, -1])
def test_a_truncated_legacy_checkpoint_is_named_before_loading(tmp_path, cut):
    """Cut in a pickle, between pickles, in a storage's bytes: torch.load said 'unexpected
    EOF, expected N more bytes' or a bare EOFError, naming no file."""
    data = open(legacy(tmp_path / 'whole.pth'), 'rb').read()
    path = write(tmp_path / 'cut.pth', data[:cut])
    problem = checkpoint_file_problem(path)
    assert problem.startswith(f'is truncated ({len(data[:cut])} bytes'), problem
    assert 'legacy' in problem and 'interrupted' in problem
    with pytest.raises(ValueError, match=f"checkpoint '{path}' is truncated"):
        files_module.load_local(path)


def test_an_intact_legacy_checkpoint_loads_with_a_warning_that_its_bytes_are_unchecked(
        tmp_path, logged):
    path = legacy(tmp_path / 'legacy.pth', 2.)
    assert checkpoint_file_problem(path) is None
    assert len(logged) == 1
    assert f'checkpoint {path!r} is in torch\'s legacy (non-zip) format' in logged[0]
    assert 'cannot be checked' in logged[0] and 'torch.save' in logged[0]
    loaded = files_module.load_local(path)
    assert torch.equal(loaded['state_dict']['w'], torch.full((64, ), 2.))
    assert checkpoint_file_problem(path) is None
    assert len(logged) == 1  # once per file


def test_other_formats_are_named_with_their_conversion(tmp_path):
    import gzip
    import json
    import struct
    import tarfile
    zipped = saved(tmp_path / 'a.pth')
    gz = write(tmp_path / 'a.pth.gz', gzip.compress(open(zipped, 'rb').read()))
    assert checkpoint_file_problem(gz).startswith('is gzip-compressed, not a PyTorch checkpoint '
                                                  'itself: decompress it first (gunzip -k')
    header = json.dumps({'w': {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 8]}}).encode()
    st = write(tmp_path / 'a.safetensors', struct.pack('<Q', len(header)) + header + bytes(8))
    problem = checkpoint_file_problem(st)
    assert problem.startswith('is a safetensors file, not a PyTorch checkpoint: convert it')
    assert 'safetensors.torch' in problem and 'torch.save' in problem
    import numpy as np
    np.savez(str(tmp_path / 'a.npz'), w=np.zeros(2))
    assert checkpoint_file_problem(str(tmp_path / 'a.npz')) == (
        "is a zip archive but not a PyTorch checkpoint (no '<name>/data.pkl' record; "
        "its records: ['w.npy'])")
    with tarfile.open(tmp_path / 'old.tar', 'w') as tar:
        for name in ('sys_info', 'pickle', 'storages', 'tensors'):
            tar.add(zipped, arcname=name)
    assert checkpoint_file_problem(str(tmp_path / 'old.tar')).startswith(
        "is in torch's legacy .tar format (torch < 0.4), which torch loads only without "
        'weights_only: convert it once')
    with tarfile.open(tmp_path / 'weights.tar', 'w') as tar:
        tar.add(zipped, arcname='model/a.pth')
    assert checkpoint_file_problem(str(tmp_path / 'weights.tar')) == (
        "is a tar archive, not a PyTorch checkpoint: extract it (its members: ['model/a.pth'])")
    pickled = tmp_path / 'plain.pkl'
    import pickle
    pickled.write_bytes(pickle.dumps({'w': [1.0, 2.0]}, protocol=2))
    assert checkpoint_file_problem(str(pickled)) == (
        'is a Python pickle but not a PyTorch checkpoint (torch.save writes a zip archive, or '
        'a pickle starting with its magic number)')


def test_links_that_lead_nowhere_are_named(tmp_path):
    loop = tmp_path / 'loop.pth'
    os.symlink(tmp_path / 'back.pth', loop)
    os.symlink(loop, tmp_path / 'back.pth')
    with pytest.raises(ValueError) as info:  # was: "does not exist"
        check_checkpoint_file(str(loop))
    assert str(info.value) == (f"checkpoint '{loop}' is a symbolic link loop (a link that "
                               'leads back to itself): point it at the checkpoint file')
    dangling = tmp_path / 'dangling.pth'
    os.symlink(tmp_path / 'gone' / 'epoch_9.pth', dangling)
    with pytest.raises(FileNotFoundError) as info:
        check_checkpoint_file(str(dangling), '--resume checkpoint')
    assert str(info.value) == (f"--resume checkpoint '{dangling}' does not exist: it is a "
                               f"symbolic link to '{tmp_path / 'gone' / 'epoch_9.pth'}', "
                               'which does not exist')
