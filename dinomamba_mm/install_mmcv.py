"""Install mmcv with compiled ops that match the installed torch; no source checkout needed.

    python -m dinomamba_mm.install_mmcv [--find-links DIR ...] [-c CONSTRAINTS ...] [--dry-run]

mmcv is not an install requirement of dinomamba_mm (as of mmpretrain, mmseg and mmdet): its
compiled ops must match torch. mmcv 2.1.0, the last version mmseg 1.2.2 and mmdet 3.3.0 accept,
ships no wheel for torch > 2.1, and ``mim install mmcv`` builds its sdist in an isolated build
environment whose setuptools lacks ``pkg_resources``. This command, in order:

1. does nothing when mmcv 2.1.0 is installed and its compiled ops import;
2. installs the first ``mmcv-2.1.0-*.whl`` whose ops import against the installed torch, from
   the folders of ``$PIP_FIND_LINKS`` and ``--find-links``, then from its own cache
   ``${DINOMAMBA_CACHE:-~/.cache/dinomamba_mm}/wheels/torch-<version>/`` (keyed on torch: pip's
   own wheel cache is keyed on the sdist only and would reuse a wheel built against another
   torch);
3. otherwise builds the PyPI sdist into that cache (about 10 minutes on two cores): setuptools
   < 70 during the build, ``--no-build-isolation``, ``-std=c++20`` instead of ``-std=c++17`` for
   torch >= 2.14 (whose headers require it), no debug information (``-g0`` after ``$CFLAGS``),
   in a temporary folder (``$TMPDIR``) that must have BUILD_NEEDS_MB free and is removed
   afterwards; then installs it as in 2.

Installs leave torch, torchvision and setuptools as they are (pip constraints), and any
``-c`` file given (``tools/setup_env.sh`` passes ``requirements/runtime.txt``). ``--dry-run``
prints the pip commands instead of running them: those of every wheel found, then the build.
It needs pip and torch; on import, ``dinomamba_mm`` names this command when mmcv is missing
(:func:`mmcv_problem`).
"""
import argparse
import glob
import importlib.metadata
import importlib.util
import os
import os.path as osp
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from typing import List, Optional, Sequence

#: the mmcv this command installs; MMCV_MIN <= version < MMCV_MAX is what mmpretrain 1.2.0,
#: mmseg 1.2.2 and mmdet 3.3.0 all accept
MMCV_VERSION = '2.1.0'
MMCV_MIN, MMCV_MAX = '2.0.0', '2.2.0'
INSTALL_COMMAND = 'python -m dinomamba_mm.install_mmcv'
#: what is built with, as measured: newer setuptools fail on mmcv 2.1.0's setup.py
BUILD_SETUPTOOLS = 'setuptools<70'
#: the first torch whose headers refuse C++17
TORCH_NEEDS_CXX20 = (2, 14)
#: appended to Python's compiler flags for the build: no debug information, which nobody
#: reads in an installed mmcv and which made the build's files about 20 times larger
BUILD_CFLAGS = '-g0'
#: free space the build needs in its temporary folder (sdist, objects, wheel), MB: ten times
#: the peak measured with BUILD_CFLAGS (19 MB, torch 2.14.1, 2026-12-05)
BUILD_NEEDS_MB = 200
OPS_IMPORT = ('import mmcv, sys; from mmcv.ops import nms, RoIAlign; '
              f'sys.exit(mmcv.__version__ != {MMCV_VERSION!r})')


def _version_tuple(version: str) -> tuple:
    numbers = []
    for part in version.split('+')[0].split('.'):
        digits = ''.join(c for c in part if c.isdigit())
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


def _installed(distribution: str) -> Optional[str]:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def mmcv_problem() -> Optional[str]:
    """Why the installed mmcv cannot serve mmpretrain / mmseg / mmdet, with the command that
    installs one, or None when it looks right.

    Reads the installed metadata and files only (no ``import mmcv``).
    """
    version = _installed('mmcv')
    try:
        spec = importlib.util.find_spec('mmcv')
    except ImportError:  # an mmcv whose package cannot be imported at all
        spec = None
    if version is None or spec is None:
        problem = 'mmcv is not installed (mmcv-lite has no compiled ops and does not count)'
    elif not _version_tuple(MMCV_MIN) <= _version_tuple(version) < _version_tuple(MMCV_MAX):
        problem = (f'mmcv {version} is installed; mmpretrain, mmseg and mmdet need '
                   f'{MMCV_MIN} <= mmcv < {MMCV_MAX}')
    elif not any(glob.glob(osp.join(folder, '_ext*'))
                 for folder in spec.submodule_search_locations or ()):
        problem = f'mmcv {version} has no compiled ops (mmcv._ext)'
    else:
        return None
    return (f'{problem}. Install mmcv {MMCV_VERSION} with its compiled ops for your torch with '
            f'`{INSTALL_COMMAND}` (README, section Install)')


def check_mmcv() -> None:
    """Raise ImportError naming the install command unless mmcv with compiled ops is installed."""
    problem = mmcv_problem()
    if problem is not None:
        raise ImportError(f'dinomamba_mm: {problem}')


def cache_dir(torch_version: str) -> str:
    """Our wheel cache for ``torch_version``: ``<cache>/wheels/torch-<version>``."""
    root = os.environ.get('DINOMAMBA_CACHE') or osp.join('~', '.cache', 'dinomamba_mm')
    return osp.join(osp.expanduser(root), 'wheels', f'torch-{torch_version.split("+")[0]}')


def wheel_folders(find_links: Sequence[str], torch_version: str) -> List[str]:
    """The folders searched for a wheel, in order: ``$PIP_FIND_LINKS`` (whitespace-separated,
    ``file://`` allowed), ``find_links``, our cache."""
    given = os.environ.get('PIP_FIND_LINKS', '').split() + list(find_links)
    folders = [link[len('file://'):] if link.startswith('file://') else link for link in given]
    return [folder for folder in folders + [cache_dir(torch_version)] if osp.isdir(folder)]


def candidate_wheels(folders: Sequence[str]) -> List[str]:
    """The ``mmcv-<MMCV_VERSION>-*.whl`` files of ``folders``, in folder order."""
    return [wheel for folder in folders
            for wheel in sorted(glob.glob(osp.join(folder, f'mmcv-{MMCV_VERSION}-*.whl')))]


class Installer:
    """Runs (or, with ``dry_run``, prints) the pip commands of this module.

    Args:
        constraints (Sequence[str]): pip constraint files given on the command line.
            Defaults to ().
        dry_run (bool): Print the commands instead of running them. Defaults to False.
    """

    def __init__(self, constraints: Sequence[str] = (), dry_run: bool = False) -> None:
        self.constraints = list(constraints)
        self.dry_run = dry_run
        self.torch_version = _installed('torch')
        if self.torch_version is None:
            raise RuntimeError('torch is not installed: install torch (and torchvision) first, '
                               f'then run `{INSTALL_COMMAND}` again')

    @staticmethod
    def log(message: str) -> None:
        print(f'[install_mmcv] {message}', file=sys.stderr, flush=True)

    def run(self, command: Sequence[str], cwd: Optional[str] = None,
            env: Optional[dict] = None, check: bool = True) -> bool:
        """Run ``command`` (or print it); whether it succeeded."""
        if self.dry_run:
            where = f'(cd {shlex.quote(cwd)} && ' if cwd else ''
            extra = ''.join(f'{k}={shlex.quote(v)} ' for k, v in (env or {}).items())
            print(f'{where}{extra}{shlex.join(command)}{")" if cwd else ""}', flush=True)
            return True
        result = subprocess.run(list(command), cwd=cwd,
                                env=None if env is None else dict(os.environ, **env))
        if check and result.returncode:
            raise subprocess.CalledProcessError(result.returncode, command)
        return result.returncode == 0

    def pip(self, *args: str, check: bool = True, **kwargs) -> bool:
        return self.run([sys.executable, '-m', 'pip', '--disable-pip-version-check', *args],
                        check=check, **kwargs)

    @staticmethod
    def ops_import() -> bool:
        """Whether mmcv MMCV_VERSION and its compiled ops import (in a fresh interpreter)."""
        return subprocess.run([sys.executable, '-c', OPS_IMPORT],
                              capture_output=True).returncode == 0

    def pins(self) -> List[str]:
        """Constraints that keep torch, torchvision and setuptools as installed."""
        return [f'{name}=={version}' for name in ('torch', 'torchvision', 'setuptools')
                for version in [_installed(name)] if version is not None]

    def install_wheel(self, wheel: str, pins_file: str) -> bool:
        """Install ``wheel`` (its dependencies within the constraints, then mmcv itself over a
        broken one); keep it if its ops import, else uninstall it."""
        self.log(f'trying {wheel}')
        constraints = [arg for path in [pins_file, *self.constraints] for arg in ('-c', path)]
        installed = (self.pip('install', '-q', '--no-cache-dir', wheel, *constraints,
                              check=False)
                     and self.pip('install', '-q', '--no-deps', '--no-cache-dir',
                                  '--force-reinstall', wheel, check=False))
        if self.dry_run:
            return False
        if installed and self.ops_import():
            return True
        why = (f'its compiled ops do not import against torch {self.torch_version}' if installed
               else 'pip could not install it (its message is above)')
        self.log(f'{osp.basename(wheel)}: {why}; uninstalling it')
        self.pip('uninstall', '-q', '-y', 'mmcv', check=False)
        return False

    @staticmethod
    def check_room(folder: str) -> None:
        """Raise OSError unless ``folder``'s filesystem has BUILD_NEEDS_MB free.

        Without the room the compiler stops half-way with the assembler's bare "No space left on
        device", after minutes of building.
        """
        free_mb = shutil.disk_usage(folder).free // 2**20
        if free_mb < BUILD_NEEDS_MB:
            raise OSError(f'building mmcv {MMCV_VERSION} needs about {BUILD_NEEDS_MB} MB free in '
                          f'its temporary folder {folder}; its filesystem has {free_mb} MB. Free '
                          'some space, set TMPDIR to a folder with room, or give a folder '
                          f'holding an mmcv-{MMCV_VERSION} wheel with --find-links')

    def build(self, out: str) -> None:
        """Build the mmcv sdist into a wheel in ``out``, in a temporary folder removed after."""
        self.log(f'building mmcv {MMCV_VERSION} from its sdist for torch {self.torch_version} '
                 f'into {out} (about 10 minutes on two cores)')
        work = tempfile.mkdtemp(prefix='mmcv-build-')
        try:
            if not self.dry_run:
                self.check_room(work)
            self.build_in(work, out)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def build_in(self, work: str, out: str) -> None:
        """Download, unpack and build the sdist in the folder ``work``."""
        source = osp.join(work, f'mmcv-{MMCV_VERSION}')
        self.pip('download', '-q', '--no-deps', '--no-binary', ':all:', '--no-cache-dir',
                 f'mmcv=={MMCV_VERSION}', '-d', work)
        cxx20 = _version_tuple(self.torch_version) >= TORCH_NEEDS_CXX20
        if self.dry_run:
            print(f'# unpack {work}/mmcv-{MMCV_VERSION}.tar.gz'
                  + ('; in its setup.py: -std=c++17 -> -std=c++20' if cxx20 else ''))
        else:
            with tarfile.open(osp.join(work, f'mmcv-{MMCV_VERSION}.tar.gz')) as sdist:
                sdist.extractall(work)  # PyPI's own sdist
            if cxx20:
                setup_py = osp.join(source, 'setup.py')
                with open(setup_py) as f:
                    text = f.read()
                with open(setup_py, 'w') as f:
                    f.write(text.replace('-std=c++17', '-std=c++20'))
        setuptools = _installed('setuptools')
        self.pip('install', '-q', BUILD_SETUPTOOLS, 'wheel')
        cflags = f'{os.environ.get("CFLAGS", "")} {BUILD_CFLAGS}'.strip()
        try:
            self.pip('wheel', '-q', '--no-deps', '--no-build-isolation', '--no-cache-dir', '.',
                     '-w', out, cwd=source,
                     env=dict(MMCV_WITH_OPS='1', CFLAGS=cflags,
                              MAX_JOBS=os.environ.get('MAX_JOBS', str(os.cpu_count() or 1))))
        finally:
            if setuptools is not None:
                self.pip('install', '-q', f'setuptools=={setuptools}')

    def install(self, find_links: Sequence[str] = ()) -> None:
        """Steps 1 to 3 of the module docstring."""
        if self.ops_import():
            self.log(f'mmcv {MMCV_VERSION} is installed and its ops import against torch '
                     f'{self.torch_version}: nothing to do')
            return
        with tempfile.NamedTemporaryFile('w', suffix='.txt', delete=False) as f:
            f.write('\n'.join(self.pins()) + '\n')
            pins_file = f.name
        try:
            folders = wheel_folders(find_links, self.torch_version)
            if any(self.install_wheel(w, pins_file) for w in candidate_wheels(folders)):
                return
            own = cache_dir(self.torch_version)
            self.build(own)
            if not any(self.install_wheel(w, pins_file) for w in candidate_wheels([own])):
                if not self.dry_run:
                    raise RuntimeError(f'the mmcv wheel built in {own} does not import against '
                                       f'torch {self.torch_version}')
        finally:
            os.remove(pins_file)


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(
        prog=INSTALL_COMMAND, description=f'Install mmcv {MMCV_VERSION} with compiled ops for '
        'the installed torch (a cached wheel, else a build of the sdist).')
    parser.add_argument('--find-links', action='append', default=[], metavar='DIR',
                        help='a folder that may hold an mmcv wheel (besides $PIP_FIND_LINKS)')
    parser.add_argument('-c', '--constraint', action='append', default=[], metavar='FILE',
                        help='pip constraints file for the wheel install')
    parser.add_argument('--dry-run', action='store_true',
                        help='print the pip commands instead of running them')
    args = parser.parse_args(argv)
    Installer(args.constraint, args.dry_run).install(args.find_links)


if __name__ == '__main__':
    main()
