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
