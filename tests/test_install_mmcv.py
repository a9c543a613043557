"""``python -m dinomamba_mm.install_mmcv``: what it finds and the commands it runs, without
building (the build is the one tools/setup_env.sh ran; the cached wheel of CI is checked)."""
import glob
import importlib.machinery
import importlib.metadata
import os
import os.path as osp
import subprocess
import sys
from collections import namedtuple

import pytest

from dinomamba_mm import install_mmcv
from dinomamba_mm.install_mmcv import MMCV_VERSION, Installer

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
SHARED_WHEELS = osp.join(osp.dirname(ROOT), 'shared', 'wheels')
TORCH = importlib.metadata.version('torch')
shutil_usage = namedtuple('usage', 'total used free')


def test_the_installed_mmcv_is_accepted():
    assert install_mmcv.mmcv_problem() is None
    install_mmcv.check_mmcv()


@pytest.mark.parametrize('version, spec_folder, problem', [
    (None, None, 'mmcv is not installed'),
    ('2.2.0', 'ops', 'mmcv 2.2.0 is installed; mmpretrain, mmseg and mmdet need 2.0.0 <= mmcv '
     '< 2.2.0'),
    ('2.1.0', 'lite', 'mmcv 2.1.0 has no compiled ops (mmcv._ext)'),
])
def test_a_missing_or_unfit_mmcv_is_named_with_the_install_command(
        version, spec_folder, problem, monkeypatch, tmp_path):
    (tmp_path / 'ops').mkdir()
    (tmp_path / 'ops' / '_ext.cpython-311-x86_64-linux-gnu.so').write_bytes(b'')
    (tmp_path / 'lite').mkdir()
    monkeypatch.setattr(install_mmcv, '_installed',
                        lambda name: version if name == 'mmcv' else TORCH)
    spec = None
    if spec_folder is not None:
        spec = importlib.machinery.ModuleSpec('mmcv', None, is_package=True)
        spec.submodule_search_locations = [str(tmp_path / spec_folder)]
    monkeypatch.setattr(install_mmcv.importlib.util, 'find_spec', lambda name: spec)
    with pytest.raises(ImportError) as error:
        install_mmcv.check_mmcv()
    assert problem in str(error.value)
    assert '`python -m dinomamba_mm.install_mmcv`' in str(error.value)


def _wheel(folder, tag='cp311-cp311-linux_x86_64'):
    os.makedirs(folder, exist_ok=True)
    path = osp.join(folder, f'mmcv-{MMCV_VERSION}-{tag}.whl')
    open(path, 'wb').close()
    return path


def test_wheels_are_looked_for_in_pip_find_links_then_the_given_folders_then_the_cache(
        tmp_path, monkeypatch):
    links, given = _wheel(str(tmp_path / 'links')), _wheel(str(tmp_path / 'given'))
    monkeypatch.setenv('DINOMAMBA_CACHE', str(tmp_path / 'cache'))
    cached = _wheel(install_mmcv.cache_dir(TORCH))
    assert install_mmcv.cache_dir('2.14.1+cu130') == str(
        tmp_path / 'cache' / 'wheels' / 'torch-2.14.1')
    monkeypatch.setenv('PIP_FIND_LINKS', f'file://{tmp_path / "links"} {tmp_path / "none"}')
    folders = install_mmcv.wheel_folders([str(tmp_path / 'given')], TORCH)
    assert install_mmcv.candidate_wheels(folders) == [links, given, cached]


@pytest.mark.skipif(not glob.glob(osp.join(SHARED_WHEELS, 'mmcv-*.whl')),
                    reason='no shared wheel cache beside the checkout')
def test_the_shared_wheel_cache_is_found(monkeypatch, tmp_path):
    """CI's ../shared/wheels (PIP_FIND_LINKS in .ci/run) holds the wheel for this machine."""
    monkeypatch.setenv('PIP_FIND_LINKS', SHARED_WHEELS)
    monkeypatch.setenv('DINOMAMBA_CACHE', str(tmp_path))
    wheels = install_mmcv.candidate_wheels(install_mmcv.wheel_folders([], TORCH))
    tag = f'cp{sys.version_info.major}{sys.version_info.minor}'
    assert osp.join(SHARED_WHEELS, f'mmcv-{MMCV_VERSION}-{tag}-{tag}-linux_x86_64.whl') in wheels


class Recorded(Installer):
    """Installer whose pip commands are recorded and succeed; the ops import once
    ``fits_after`` wheels were installed."""

    def __init__(self, fits_after=None):
        super().__init__(constraints=['runtime.txt'])
        self.commands, self.fits_after, self.installed = [], fits_after, 0

    def pip(self, *args, check=True, **kwargs):
        self.commands.append(args)
        if args[0] == 'install' and '--force-reinstall' in args:
            self.installed += 1
        return True

    def ops_import(self):
        return self.fits_after is not None and self.installed >= self.fits_after

    def build(self, out):
        self.commands.append(('build', out))


def test_the_first_wheel_whose_ops_import_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv('PIP_FIND_LINKS', str(tmp_path / 'links'))
    monkeypatch.setenv('DINOMAMBA_CACHE', str(tmp_path / 'cache'))
    first = _wheel(str(tmp_path / 'links'), 'cp311-cp311-linux_x86_64')
    second = _wheel(str(tmp_path / 'links'), 'cp311-cp311-manylinux_2_28_x86_64')
    installer = Recorded(fits_after=2)
    installer.install()
    wheels = [args[3] for args in installer.commands if args[:3] == ('install', '-q',
                                                                     '--no-cache-dir')]
    assert wheels == [first, second]  # the first did not import: uninstalled, the next tried
    assert ('uninstall', '-q', '-y', 'mmcv') in installer.commands
    assert not any(args[0] == 'build' for args in installer.commands)
    with_deps = [args for args in installer.commands if args[:4] == (
        'install', '-q', '--no-cache-dir', second)][0]
    assert with_deps[-2:] == ('-c', 'runtime.txt')  # the given constraints, after the pins


def test_without_a_fitting_wheel_it_builds_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv('PIP_FIND_LINKS', '')
    monkeypatch.setenv('DINOMAMBA_CACHE', str(tmp_path / 'cache'))
    installer = Recorded(fits_after=None)
    with pytest.raises(RuntimeError, match='does not import against torch'):
        installer.install()
    assert ('build', install_mmcv.cache_dir(TORCH)) in installer.commands


def test_the_pins_keep_torch_and_setuptools():
    pins = Installer().pins()
    assert f'torch=={TORCH}' in pins
    assert f'setuptools=={importlib.metadata.version("setuptools")}' in pins


def test_the_build_command_it_would_run(tmp_path, monkeypatch, capsys):
    """--dry-run: the sdist build of tools/setup_env.sh (setuptools < 70 for the build only,
    --no-build-isolation, C++20 for torch >= 2.14), without running it."""
    monkeypatch.setenv('MAX_JOBS', '2')
    monkeypatch.setenv('CFLAGS', '-O2')
    Installer(dry_run=True).build(str(tmp_path / 'out'))
    printed = capsys.readouterr().out
    assert f'-m pip --disable-pip-version-check download -q --no-deps --no-binary :all: ' \
           f'--no-cache-dir mmcv=={MMCV_VERSION}' in printed
    assert "install -q 'setuptools<70' wheel" in printed
    # the user's CFLAGS, then no debug information
    assert f"mmcv-{MMCV_VERSION} && MMCV_WITH_OPS=1 CFLAGS='-O2 -g0' MAX_JOBS=2 " in printed
    assert f'wheel -q --no-deps --no-build-isolation --no-cache-dir . -w {tmp_path}/out' \
        in printed
    setuptools = importlib.metadata.version('setuptools')
    assert f'install -q setuptools=={setuptools}' in printed  # put back afterwards
    torch_major_minor = tuple(int(p) for p in TORCH.split('.')[:2])
    assert ('-std=c++17 -> -std=c++20' in printed) == (torch_major_minor >= (2, 14))


class FailingBuild(Installer):
    """Installer whose pip commands are recorded; ``pip wheel`` fails."""

    def __init__(self, dry_run):
        super().__init__(dry_run=dry_run)
        self.commands = []

    def pip(self, *args, check=True, **kwargs):
        self.commands.append(args)
        if args[0] == 'wheel':
            raise subprocess.CalledProcessError(1, args)
        return True


def test_the_build_folder_is_removed_even_when_the_build_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(install_mmcv.tempfile, 'tempdir', str(tmp_path))
    installer = FailingBuild(dry_run=True)
    with pytest.raises(subprocess.CalledProcessError):
        installer.build(str(tmp_path / 'out'))
    assert [args[0] for args in installer.commands] == ['download', 'install', 'wheel',
                                                        'install']
    assert os.listdir(tmp_path) == []


def test_a_build_without_room_stops_before_it_starts(tmp_path, monkeypatch):
    """A build that would run out of space stops at once, naming the folder, the free space
    and the ways out; nothing is downloaded and nothing is left behind."""
    monkeypatch.setattr(install_mmcv.tempfile, 'tempdir', str(tmp_path))
    free = (install_mmcv.BUILD_NEEDS_MB - 1) * 2**20
    monkeypatch.setattr(install_mmcv.shutil, 'disk_usage',
                        lambda path: shutil_usage(total=10 * free, used=9 * free, free=free))
    installer = FailingBuild(dry_run=False)
    with pytest.raises(OSError) as error:
        installer.build(str(tmp_path / 'out'))
    message = str(error.value)
    assert f'needs about {install_mmcv.BUILD_NEEDS_MB} MB free in its temporary folder ' \
           f'{tmp_path}{os.sep}mmcv-build-' in message
    assert f'its filesystem has {install_mmcv.BUILD_NEEDS_MB - 1} MB' in message
    assert 'set TMPDIR' in message and '--find-links' in message
    assert installer.commands == [] and os.listdir(tmp_path) == []


def test_a_wheel_pip_cannot_install_is_not_blamed_on_torch(tmp_path, monkeypatch, capsys):
    """When pip fails (a full disk, say), the log says so instead of 'does not fit torch'."""
    monkeypatch.setenv('PIP_FIND_LINKS', str(tmp_path / 'links'))
    monkeypatch.setenv('DINOMAMBA_CACHE', str(tmp_path / 'cache'))
    wheel = _wheel(str(tmp_path / 'links'))

    class PipFails(Recorded):
        def pip(self, *args, check=True, **kwargs):
            super().pip(*args, check=check, **kwargs)
            return args[0] != 'install'

    assert not PipFails().install_wheel(wheel, 'pins.txt')
    log = capsys.readouterr().err
    assert f'{osp.basename(wheel)}: pip could not install it (its message is above); ' \
           'uninstalling it' in log
    assert 'torch' not in log.split('trying')[1]


def test_the_command_does_nothing_where_mmcv_works(tmp_path):
    proc = subprocess.run([sys.executable, '-m', 'dinomamba_mm.install_mmcv', '--dry-run'],
                          capture_output=True, text=True, cwd=str(tmp_path), timeout=300,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                              [ROOT, os.environ.get('PYTHONPATH', '')])))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'nothing to do' in proc.stderr and proc.stdout == ''
