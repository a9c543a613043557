"""Reading a checkpoint file: the one local loader, and what a file on disk is (readable,
truncated, corrupt, or not a checkpoint at all).

``torch.load`` reports an empty file as ``EOFError('')``, a text file as a refused pickle, a
truncated one as a zip-reader error, and loads a file whose tensor bytes changed on disk without
a word (it checks no CRC). :func:`load_local` names the file and the problem first: our loads
(the initializers, the tools, :func:`dinomamba_mm.checkpoints.read_checkpoint`) go through it,
and our tools check the ``load_from`` and resumed files they hand to mmengine's Runner with
:func:`check_checkpoint_file` and :func:`check_safe_to_unpickle` first.
"""
import glob
import os
import os.path as osp
import pickle
import re
import time
import zipfile
from typing import Optional

import torch
from mmengine.logging import print_log

from dinomamba_mm.compat import TORCH_LOADS_WEIGHTS_ONLY

_ZIP_MAGIC = b'PK\x03\x04'  # torch.save's default format (a zip archive)
_PICKLE_MAGIC = b'\x80'  # torch's legacy format (a pickle, protocol >= 2)
_LFS_POINTER = b'version https://git-lfs'
_DEFAULT_NAMES = re.compile(r'(epoch|iter)_\d+\.pth$')  # mmengine CheckpointHook's file names
UNSAFE_LOAD_ENV = 'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD'


class CheckpointError(ValueError):
    """A checkpoint that cannot be used as asked; the message names the file, what was
    expected and what was found."""


def is_local_path(filename: str) -> bool:
    """True unless ``filename`` names a scheme mmengine loads remotely (``https://``,
    ``open-mmlab://``, ``torchvision://``, ...)."""
    return '://' not in filename


#: (real path, inode, size, modification time) of the files whose every record passed its CRC,
#: so that a file checked before anything is built (tools/test.py, --resume) is not read again to
#: load it. Files modified in the last second are not kept: a change within the file system's
#: timestamp granularity would leave the modification time as it was.
_VERIFIED = set()


def checkpoint_file_problem(filename: str) -> Optional[str]:
    """Why the local file ``filename`` cannot be a readable checkpoint, or None if it can.

    Checks that it exists, is not empty, starts like a PyTorch checkpoint (a zip archive, or a
    pickle for torch's legacy format) and, for a zip archive, that its central directory is
    there (a save killed halfway leaves a file without one) and that every record matches the
    CRC the archive stores for it (bytes changed by a disk or a copy). A file that passed is
    not read again until it changes (its inode, size or modification time).
    """
    path = osp.expanduser(filename)
    if not osp.exists(path):
        return 'does not exist'
    if not osp.isfile(path):
        return 'is not a file'
    stat = os.stat(path)
    identity = (osp.realpath(path), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if identity in _VERIFIED:
        return None
    size = stat.st_size
    if size == 0:
        return 'is empty (0 bytes): the save that wrote it was interrupted, or it is not a ' \
               'checkpoint'
    with open(path, 'rb') as f:
        head = f.read(64)
    if head.startswith(_ZIP_MAGIC):
        try:
            with zipfile.ZipFile(path) as archive:
                corrupt = archive.testzip()
        except zipfile.BadZipFile:
            return (f'is truncated ({size} bytes, a zip archive without its central directory): '
                    'the save that wrote it was interrupted')
        if corrupt is None:
            if time.time() - stat.st_mtime > 1:
                _VERIFIED.add(identity)
            return None
        return (f'is corrupt: its record {corrupt!r} fails its CRC check (its bytes changed '
                'after it was written, on a disk or in a copy); fetch or copy the file again')
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
        CheckpointError: empty, truncated, corrupt or not a checkpoint, saying which.
    """
    if not isinstance(filename, str) or not is_local_path(filename):
        return
    problem = checkpoint_file_problem(filename)
    if problem == 'does not exist':
        raise FileNotFoundError(f'{what} {filename!r} does not exist')
    if problem is not None:
        raise CheckpointError(f'{what} {filename!r} {problem}')


def load_local(filename: str, map_location=None, weights_only: Optional[bool] = None):
    """mmengine's loader of local checkpoint files, after :func:`check_checkpoint_file`.

    Args:
        filename: local path.
        map_location: as :func:`torch.load`'s.
        weights_only: as :func:`torch.load`'s; None is torch's default (the safe unpickler
            from torch 2.6 on, unless ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` is set).

    Raises:
        CheckpointError: the file is no intact checkpoint.
        pickle.UnpicklingError: it holds objects the safe unpickler refuses (unpickling them
            would run code from the file); the error names the opt-in.
    """
    filename = osp.expanduser(filename)
    check_checkpoint_file(filename)
    try:
        return torch.load(filename, map_location=map_location, weights_only=weights_only)
    except pickle.UnpicklingError as error:
        refused = _refused_globals(filename)
        if not refused:
            raise error
        raise _unsafe_pickle_error(filename, refused) from None


def _refused_globals(filename: str) -> list:
    """What the safe unpickler refuses in the zip checkpoint ``filename`` (torch's public
    listing); empty for a legacy-format or damaged file."""
    try:
        return torch.serialization.get_unsafe_globals_in_checkpoint(filename)
    except Exception:  # a legacy-format or damaged file: torch's own error stands
        return []


def _unsafe_pickle_error(filename: str, refused: list) -> pickle.UnpicklingError:
    return pickle.UnpicklingError(
        f'{filename} holds references to {", ".join(refused)}, which the safe unpickler '
        '(torch.load with weights_only=True) refuses: unpickling them would run code from '
        'the file. Checkpoints written with dinomamba_mm\'s configs hold no such object. If '
        f'you trust this file, load it with {UNSAFE_LOAD_ENV}=1 set (torch then unpickles '
        'anything), or convert it once in such a process.')


def check_safe_to_unpickle(filename: str) -> None:
    """Raise :class:`pickle.UnpicklingError` naming the file, what it holds and the opt-in
    when torch's safe unpickler would refuse the local checkpoint ``filename`` (e.g. one that
    mmengine's Runner is to load); nothing when unsafe loading was opted into
    (``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``) or torch loads everything by default (< 2.6)."""
    if not TORCH_LOADS_WEIGHTS_ONLY or \
            os.environ.get(UNSAFE_LOAD_ENV, '0').lower() in ('1', 'y', 'yes', 'true'):
        return
    refused = _refused_globals(osp.expanduser(filename))
    if refused:
        raise _unsafe_pickle_error(filename, refused)


def check_output_path(output: str, inputs: str) -> None:
    """Refuse to write a tool's ``output`` over its input checkpoint ``inputs`` (the same file
    under another name, a link, included)."""
    paths = osp.expanduser(output), osp.expanduser(inputs)
    if all(osp.exists(path) for path in paths) and osp.samefile(*paths):
        raise CheckpointError(f'output {output!r} is the input checkpoint {inputs!r}: writing '
                              'it would overwrite the input; give another output path')


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
