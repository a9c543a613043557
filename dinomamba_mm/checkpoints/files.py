"""What a checkpoint file on disk is: readable, truncated, or not a checkpoint at all.

``torch.load`` reports an empty file as ``EOFError('')``, a text file as ``KeyError: 101`` and a
truncated one as a zip-reader error; these functions name the file and the problem before it
is loaded, reading only its first bytes and (for zip archives) its central directory.
"""
import glob
import os
import os.path as osp
import re
import zipfile
from typing import Optional

from mmengine.logging import print_log

_ZIP_MAGIC = b'PK\x03\x04'  # torch.save's default format (a zip archive)
_PICKLE_MAGIC = b'\x80'  # torch's legacy format (a pickle, protocol >= 2)
_LFS_POINTER = b'version https://git-lfs'
_DEFAULT_NAMES = re.compile(r'(epoch|iter)_\d+\.pth$')  # mmengine CheckpointHook's file names


def is_local_path(filename: str) -> bool:
    """True unless ``filename`` names a scheme mmengine loads remotely (``https://``,
    ``open-mmlab://``, ``torchvision://``, ...)."""
    return '://' not in filename


def checkpoint_file_problem(filename: str) -> Optional[str]:
    """Why the local file ``filename`` cannot be a readable checkpoint, or None if it can.

    Checks that it exists, is not empty, starts like a PyTorch checkpoint (a zip archive, or a
    pickle for torch's legacy format) and, for a zip archive, that its central directory is
    there (a save killed halfway leaves a file without one).
    """
    path = osp.expanduser(filename)
    if not osp.exists(path):
        return 'does not exist'
    if not osp.isfile(path):
        return 'is not a file'
    size = osp.getsize(path)
    if size == 0:
        return 'is empty (0 bytes): the save that wrote it was interrupted, or it is not a ' \
               'checkpoint'
    with open(path, 'rb') as f:
        head = f.read(64)
    if head.startswith(_ZIP_MAGIC):
        try:
            with zipfile.ZipFile(path):
                return None
        except zipfile.BadZipFile:
            return (f'is truncated ({size} bytes, a zip archive without its central directory): '
                    'the save that wrote it was interrupted')
    if head.startswith(_PICKLE_MAGIC):
        return None
    if head.startswith(_LFS_POINTER):
        return 'is a Git LFS pointer, not the checkpoint: fetch the file (git lfs pull)'
    try:
        text = head.decode('utf-8')
    except UnicodeDecodeError:
        return f'is not a PyTorch checkpoint: it starts with the bytes {head[:16]!r}'
    kind = 'an HTML page' if text.lstrip().lower().startswith(('<!doctype html', '<html')) \
        else 'text'
    return f'is not a PyTorch checkpoint but {kind}, starting with {text[:40]!r}'


def check_checkpoint_file(filename: str, what: str = 'checkpoint') -> None:
    """Raise if the local file ``filename`` cannot be a readable checkpoint; remote names
    (URLs) pass unchecked.

    Args:
        filename: path (or URL) of the checkpoint.
        what: how the error names the file, e.g. ``'--resume checkpoint'``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: empty, truncated or not a checkpoint, saying which.
    """
    if not isinstance(filename, str) or not is_local_path(filename):
        return
    problem = checkpoint_file_problem(filename)
    if problem == 'does not exist':
        raise FileNotFoundError(f'{what} {filename!r} does not exist')
    if problem is not None:
        raise ValueError(f'{what} {filename!r} {problem}')


def find_resumable_checkpoint(work_dir: str) -> Optional[str]:
    """The checkpoint to resume a run in ``work_dir`` from, or None when there is none.

    Looks in ``work_dir`` itself: the file named by ``work_dir/last_checkpoint`` (what
    mmengine's ``CheckpointHook`` writes and its auto-resume reads) when it is there and
    intact, or the file of that name in ``work_dir`` when it names another folder (a moved
    or copied work dir); otherwise, with a warning naming the problem, the most recently
    written intact checkpoint named like it (``epoch_N.pth`` for ``epoch_7.pth``) or
    ``epoch_N.pth`` / ``iter_N.pth`` in ``work_dir`` (other ``*.pth`` there, e.g. pretrained
    weights, are not training checkpoints); failing that, an intact file it names elsewhere
    (``CheckpointHook(out_dir=...)``).
    """
    pointer = osp.join(work_dir, 'last_checkpoint')
    names = [_DEFAULT_NAMES]
    reason = f'{work_dir} has no last_checkpoint file'
    named = ''
    if osp.isfile(pointer):
        with open(pointer, errors='backslashreplace') as f:
            named = f.read().strip()
        reason = f'{pointer} is empty'
    if named:
        local = osp.join(work_dir, osp.basename(named))
        problem = checkpoint_file_problem(local)
        elsewhere = osp.abspath(local) != osp.abspath(named)
        if problem is None:
            if elsewhere:
                print_log(f'{pointer} names {named}, which is not in {work_dir} (the work dir '
                          f'was moved or copied); resuming from {local}, the file of that '
                          'name in the work dir', logger='current', level=30)
            return local
        reason = (f'{pointer} names {named}, and {local} {problem}' if elsewhere
                  else f'{named} (named by {pointer}) {problem}')
        name = re.escape(osp.basename(named))
        names.append(re.compile(re.sub(r'\d+', r'\\d+', name) + '$'))
    intact = [path for path in glob.glob(osp.join(glob.escape(work_dir), '*.pth'))
              if any(n.match(osp.basename(path)) for n in names)
              and checkpoint_file_problem(path) is None]
    if intact:
        newest = max(intact, key=lambda path: (os.stat(path).st_mtime_ns, path))
        print_log(f'{reason}; resuming from {newest} instead, the most recently written intact '
                  'checkpoint', logger='current', level=30)
        return newest
    if named and checkpoint_file_problem(named) is None:
        print_log(f'{reason}; resuming from {named}, the file it names outside the work dir',
                  logger='current', level=30)
        return named
    if osp.isfile(pointer):
        print_log(f'{reason}, and no other intact checkpoint matching '
                  f'{" or ".join(repr(n.pattern) for n in names)} was found in {work_dir}',
                  logger='current', level=30)
    return None
