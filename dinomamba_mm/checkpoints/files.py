"""Reading a checkpoint file: the one local loader, and what a file on disk is (readable,
truncated, corrupt, or not a checkpoint at all).

``torch.load`` reports an empty file as ``EOFError('')``, a text file as a refused pickle, a
truncated one as a zip-reader error, and loads a file whose tensor bytes changed on disk without
a word (it checks no CRC). :func:`load_local` names the file and the problem first: our loads
(the initializers, the tools, :func:`dinomamba_mm.checkpoints.read_checkpoint`) go through it,
and our tools check the ``load_from`` and resumed files they hand to mmengine's Runner with
:func:`check_checkpoint_file` and :func:`check_safe_to_unpickle` first.
"""
import errno
import glob
import os
import os.path as osp
import pickle
import re
import tarfile
import time
import warnings
import zipfile
from typing import Optional

import torch
from mmengine.logging import print_log

from dinomamba_mm.compat import TORCH_LOADS_WEIGHTS_ONLY

_ZIP_MAGIC = b'PK\x03\x04'  # torch.save's default format (a zip archive)
_PICKLE_MAGIC = b'\x80'  # torch's legacy format (a pickle, protocol >= 2)
_LFS_POINTER = b'version https://git-lfs'
_GZIP_MAGIC = b'\x1f\x8b'
_TAR_MAGIC, _TAR_MAGIC_AT = b'ustar', 257
_LEGACY_TAR_MEMBERS = ('sys_info', 'pickle', 'storages', 'tensors')
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
#: the same for legacy-format files whose unverifiable bytes were warned about
_UNCHECKED_WARNED = set()


def checkpoint_file_problem(filename: str) -> Optional[str]:
    """Why the local file ``filename`` cannot be a readable checkpoint, or None if it can.

    Checks that it exists (a symbolic link loop or a link to nothing is named as such), is not
    empty and is in one of the formats ``torch.load`` reads: for a zip archive (torch.save's
    default), that it holds a pickle record, that its central directory is there (a save
    killed halfway leaves a file without one) and that every record matches the CRC the
    archive stores for it (bytes changed by a disk or a copy); for torch's legacy pickle
    format, that every pickle and every storage the pickles declare is complete (its bytes
    carry no checksum: a warning says so, once per file); torch's legacy .tar format, gzip,
    safetensors, other zip or tar archives and plain pickles are named with the way to a
    checkpoint. A file that passed is not read again until it changes (its inode, size or
    modification time).
    """
    path = osp.expanduser(filename)
    if not osp.exists(path):
        return _missing_problem(path)
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
        head = f.read(_TAR_MAGIC_AT + len(_TAR_MAGIC))
    if head.startswith(_ZIP_MAGIC):
        problem = _zip_problem(path, size)
    elif head.startswith(_PICKLE_MAGIC):
        problem = _legacy_problem(path, size)
        if problem is None and identity not in _UNCHECKED_WARNED:
            _UNCHECKED_WARNED.add(identity)
            print_log(f'checkpoint {filename!r} is in torch\'s legacy (non-zip) format: its '
                      'tensor bytes carry no checksum, so a change on a disk or in a copy '
                      'cannot be checked. Save it again with torch.save (zip format, with a '
                      'CRC per record) to have it checked', logger='current', level=30)
    else:
        problem = _other_format(path, head)
    if problem is None and time.time() - stat.st_mtime > 1:
        _VERIFIED.add(identity)
    return problem


def _missing_problem(path: str) -> str:
    """'does not exist', or why a symbolic link leads nowhere."""
    if not osp.islink(path):
        return 'does not exist'
    try:
        os.stat(path)
    except OSError as error:
        if error.errno == errno.ELOOP:
            return ('is a symbolic link loop (a link that leads back to itself): point it at '
                    'the checkpoint file')
    return (f'does not exist: it is a symbolic link to {os.readlink(path)!r}, which does not '
            'exist')


def _zip_problem(path: str, size: int) -> Optional[str]:
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if not any(name.endswith('/data.pkl') or name == 'data.pkl' for name in names):
                return ("is a zip archive but not a PyTorch checkpoint (no '<name>/data.pkl' "
                        f'record; its records: {names[:8]})')
            corrupt = archive.testzip()
    except zipfile.BadZipFile:
        return (f'is truncated ({size} bytes, a zip archive without its central directory): '
                'the save that wrote it was interrupted')
    if corrupt is not None:
        return (f'is corrupt: its record {corrupt!r} fails its CRC check (its bytes changed '
                'after it was written, on a disk or in a copy); fetch or copy the file again')
    return None


class _Stub:
    """Whatever a pickle names (a class, a function): built, called and filled without
    importing or running anything, so that a pickle's structure can be read safely."""

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __call__(self, *args, **kwargs) -> '_Stub':
        return _Stub()

    def __setstate__(self, state) -> None:
        pass

    def __setitem__(self, key, value) -> None:
        pass

    def append(self, value) -> None:
        pass

    def extend(self, values) -> None:
        pass


class _SkeletonUnpickler(pickle.Unpickler):
    """Reads one pickle of torch's legacy format, recording the storages it declares
    (``('storage', storage type, key, location, numel, ...)`` persistent ids)."""

    def __init__(self, file, storages: dict) -> None:
        super().__init__(file)
        self.storages = storages

    def find_class(self, module: str, name: str):
        return type(name, (_Stub, ), dict(qualified_name=f'{module}.{name}'))

    def persistent_load(self, pid):
        if isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == 'storage':
            kind = getattr(pid[1], 'qualified_name', '').rsplit('.', 1)[-1]
            self.storages[pid[2]] = (kind, pid[4])
        return _Stub()


def _storage_element_sizes() -> dict:
    """Bytes per element of the storage classes torch's legacy format names."""
    sizes = {'UntypedStorage': 1}
    with warnings.catch_warnings():  # the typed storage classes are deprecated
        warnings.simplefilter('ignore')
        for name in dir(torch):
            dtype = getattr(getattr(torch, name), 'dtype', None) if name.endswith('Storage') \
                else None
            if isinstance(dtype, torch.dtype):
                sizes[name] = torch.empty(0, dtype=dtype).element_size()
    return sizes


def _legacy_problem(path: str, size: int) -> Optional[str]:
    """Check the structure of a legacy-format file: its five pickles (magic number, protocol,
    system info, the object, the storage keys), then per storage an int64 element count and
    the elements, as torch's ``_legacy_save`` writes them."""
    truncated = (f'is truncated ({size} bytes, a checkpoint in torch\'s legacy format cut '
                 'short): the save that wrote it was interrupted')
    storages = {}
    with open(path, 'rb') as f:
        try:
            magic = _SkeletonUnpickler(f, storages).load()
            if magic != torch.serialization.MAGIC_NUMBER:
                return ('is a Python pickle but not a PyTorch checkpoint (torch.save writes a '
                        'zip archive, or a pickle starting with its magic number)')
            for _ in range(3):  # protocol version, system info, the object itself
                _SkeletonUnpickler(f, storages).load()
            keys = _SkeletonUnpickler(f, storages).load()
        except EOFError:
            return truncated
        except Exception as error:  # noqa: BLE001 (any malformed pickle)
            if 'truncated' in str(error):
                return truncated
            return (f'is corrupt: its pickle does not parse ({type(error).__name__}: {error}); '
                    'fetch or copy the file again')
        element_sizes = _storage_element_sizes()
        offset = f.tell()
        for key in keys if isinstance(keys, list) else []:
            kind, numel = storages.get(key, ('', None))
            if kind not in element_sizes or not isinstance(numel, int):
                return (f'is not a readable PyTorch checkpoint (its storage {key!r} is declared '
                        f'as {kind or "nothing"})')
            f.seek(offset)
            count = f.read(8)
            offset += 8 + numel * element_sizes[kind]
            if len(count) < 8 or offset > size:
                return truncated
            recorded = int.from_bytes(count, 'little')
            if recorded != numel:
                return (f'is corrupt: its storage {key!r} records {recorded} elements where its '
                        f'pickle declares {numel}')
    return None


def _other_format(path: str, head: bytes) -> str:
    """What a file that is neither a zip archive nor a pickle is."""
    if head.startswith(_LFS_POINTER):
        return 'is a Git LFS pointer, not the checkpoint: fetch the file (git lfs pull)'
    if head.startswith(_GZIP_MAGIC):
        return ('is gzip-compressed, not a PyTorch checkpoint itself: decompress it first '
                f'(gunzip -k {path}) and give the decompressed file')
    if _is_safetensors(path, head):
        return ('is a safetensors file, not a PyTorch checkpoint: convert it once with python '
                '-c "import torch; from safetensors.torch import load_file; '
                f'torch.save(dict(state_dict=load_file(\'{path}\')), \'OUT.pth\')" (pip '
                'install safetensors) and give OUT.pth')
    if head[_TAR_MAGIC_AT:].startswith(_TAR_MAGIC):
        try:
            with tarfile.open(path) as archive:
                members = archive.getnames()
        except tarfile.TarError as error:
            return f'is a damaged tar archive ({error}), not a PyTorch checkpoint'
        if set(_LEGACY_TAR_MEMBERS) <= set(members):
            return ("is in torch's legacy .tar format (torch < 0.4), which torch loads only "
                    'without weights_only: convert it once in a process you trust with '
                    f'{UNSAFE_LOAD_ENV}=1 python -c "import torch; '
                    f'torch.save(torch.load(\'{path}\'), \'OUT.pth\')" and give OUT.pth')
        return f'is a tar archive, not a PyTorch checkpoint: extract it (its members: ' \
               f'{members[:8]})'
    try:
        text = head[:64].decode('utf-8')
    except UnicodeDecodeError:
        return f'is not a PyTorch checkpoint: it starts with the bytes {head[:16]!r}'
    kind = 'an HTML page' if text.lstrip().lower().startswith(('<!doctype html', '<html')) \
        else 'text'
    return f'is not a PyTorch checkpoint but {kind}, starting with {text[:40]!r}'


def _is_safetensors(path: str, head: bytes) -> bool:
    """safetensors: an 8-byte little-endian header length, then that many bytes of JSON."""
    length = int.from_bytes(head[:8], 'little')
    return len(head) > 8 and head[8:9] == b'{' and 8 + length <= os.path.getsize(path)


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
    if isinstance(filename, os.PathLike):
        filename = os.fspath(filename)
    if not isinstance(filename, str) or not is_local_path(filename):
        return
    problem = checkpoint_file_problem(filename)
    if problem is not None and problem.startswith('does not exist'):
        raise FileNotFoundError(f'{what} {filename!r} {problem}')
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
    except EOFError as error:  # a file cut short after it was checked
        raise CheckpointError(f'checkpoint {filename!r} is truncated: {error!r} while reading '
                              'it; the save that wrote it was interrupted') from error
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
