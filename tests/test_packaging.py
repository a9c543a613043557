"""What a user gets from the source distribution, and the tools' command-line help."""
import ast
import glob
import os
import os.path as osp
import re
import shutil
import subprocess
import sys
import tarfile

import pytest

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
SOURCE_ITEMS = ('setup.py', 'MANIFEST.in', 'LICENSE', 'README.md', 'Makefile', 'pytest.ini',
                'model-index.yml', 'requirements', 'configs', 'tools', 'tests', 'docs',
                'checkpoints', 'dinomamba_mm')
IGNORED = shutil.ignore_patterns('__pycache__', '*.pyc', '.mim', '*.egg-info')


def _files(root: str, *folders: str) -> set:
    found = set()
    for folder in folders:
        for path in glob.glob(osp.join(root, folder, '**', '*'), recursive=True):
            if osp.isfile(path) and '__pycache__' not in path and not path.endswith('.pyc'):
                found.add(osp.relpath(path, root))
    return found


def _copy_of_the_checkout(tmp_path):
    """``tmp_path/source``: the checkout's source items, without build leftovers."""
    source = tmp_path / 'source'
    source.mkdir()
    for item in SOURCE_ITEMS:
        src = osp.join(ROOT, item)
        if osp.isdir(src):
            shutil.copytree(src, source / item, ignore=IGNORED)
        else:
            shutil.copy(src, source / item)
    return source


def test_sdist_ships_the_tests_docs_configs_tools_and_demo_checkpoints(tmp_path):
    """Built from a copy of the checkout (setup.py writes dinomamba_mm/.mim while building)."""
    source = _copy_of_the_checkout(tmp_path)
    proc = subprocess.run([sys.executable, 'setup.py', '-q', 'sdist', '--dist-dir',
                           str(tmp_path / 'dist')], cwd=str(source), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (archive, ) = glob.glob(str(tmp_path / 'dist' / '*.tar.gz'))
    with tarfile.open(archive) as tar:
        shipped = {name.split('/', 1)[1] for name in tar.getnames() if '/' in name}
    expected = _files(ROOT, 'tests', 'docs', 'configs', 'tools', 'requirements',
                      'checkpoints/demo') | {
        'LICENSE', 'README.md', 'Makefile', 'pytest.ini', 'model-index.yml', 'setup.py'}
    missing = sorted(expected - shipped)
    assert not missing, f'not in the sdist: {missing}'


def test_the_wheel_lists_the_extras_and_ships_what_a_wheel_user_runs(tmp_path):
    """The wheel (built from a copy of the checkout) declares the extras, keeps the optional
    packages out of the runtime requirements, and holds every tool and config under
    ``dinomamba_mm/.mim`` with the ``python -m dinomamba_mm`` runner."""
    import zipfile
    source = _copy_of_the_checkout(tmp_path)
    proc = subprocess.run([sys.executable, '-m', 'pip', 'wheel', '-q', '--no-deps',
                           '--no-build-isolation', '.', '-w', str(tmp_path / 'dist')],
                          cwd=str(source), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel, ) = glob.glob(str(tmp_path / 'dist' / 'dinomamba_mm-*.whl'))
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (metadata, ) = [n for n in names if n.endswith('.dist-info/METADATA')]
        lines = archive.read(metadata).decode().splitlines()
    extras = {line.split(': ', 1)[1] for line in lines if line.startswith('Provides-Extra: ')}
    assert extras == {'deploy', 'demo', 'benchmarks', 'tests', 'mim', 'mamba'}
    requires = {}
    for line in lines:
        if line.startswith('Requires-Dist: '):
            requirement, _, marker = line[len('Requires-Dist: '):].partition('; extra == ')
            requires.setdefault(marker.strip('"'), set()).add(
                re.split(r'[<>=;\s]', requirement)[0].lower())
    assert requires['deploy'] == {'onnx', 'onnxruntime', 'onnxscript'}
    assert requires['demo'] == {'tqdm'} and requires['benchmarks'] == {'scikit-learn'}
    assert requires['deploy'] | requires['demo'] | requires['benchmarks'] <= requires['tests']
    assert not {'tqdm', 'scikit-learn', 'onnx', 'onnxruntime', 'onnxscript'} & requires['']
    shipped = {name for name in names if name.startswith('dinomamba_mm/')}
    expected = {'dinomamba_mm/__main__.py', 'dinomamba_mm/.mim/model-index.yml'} | {
        'dinomamba_mm/.mim/' + path for path in _files(ROOT, 'tools', 'configs')} | {
        path for path in _files(ROOT, 'dinomamba_mm') if path.endswith('.py')
        and '.mim' not in path}
    assert not sorted(expected - shipped), f'not in the wheel: {sorted(expected - shipped)}'


def test_the_optional_packages_are_imported_only_by_the_tools_of_their_extra():
    """scikit-learn (benchmarks), tqdm (demo), onnx / onnxruntime / onnxscript (deploy; torch's
    exporter imports onnxscript): the package itself imports none of them."""
    importers = {}
    for path in glob.glob(osp.join(ROOT, '**', '*.py'), recursive=True):
        relative = osp.relpath(path, ROOT)
        if relative.startswith(('dinomamba_mm/', 'tools/')) and '.mim' not in relative:
            with open(path) as f:
                for module in re.findall(r'^\s*(?:import|from) (sklearn|tqdm|onnx\w*)\b',
                                         f.read(), re.MULTILINE):
                    importers.setdefault(module, set()).add(relative)
    assert importers == {'sklearn': {'tools/benchmarks/binary_auc_speed.py'},
                         'tqdm': {'tools/demo.py'},
                         'onnxruntime': {'tools/deployment/pytorch2onnx.py'}}


def _add_argument_calls(path: str):
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == 'add_argument':
            yield node


TOOLS = sorted(osp.relpath(p, ROOT)
               for p in glob.glob(osp.join(ROOT, 'tools', '**', '*.py'), recursive=True))


@pytest.mark.parametrize('tool', TOOLS)
def test_every_tool_option_has_help_text(tool):
    undocumented = []
    for call in _add_argument_calls(osp.join(ROOT, tool)):
        help_text = next((k.value for k in call.keywords if k.arg == 'help'), None)
        suppressed = isinstance(help_text, ast.Attribute) and help_text.attr == 'SUPPRESS'
        documented = suppressed or (help_text is not None and not (
            isinstance(help_text, ast.Constant) and not str(help_text.value).strip()))
        if not documented:
            names = [a.value for a in call.args if isinstance(a, ast.Constant)]
            undocumented.append(f'line {call.lineno}: {"/".join(names)}')
    assert not undocumented, f'{tool}: options without help text: {undocumented}'


def test_the_tools_are_scanned():
    assert 'tools/train.py' in TOOLS and 'tools/misc/get_flops.py' in TOOLS
    assert sum(1 for _ in _add_argument_calls(osp.join(ROOT, 'tools', 'train.py'))) >= 10


def _requirement_names(path: str) -> dict:
    """{distribution name: specifier} of a requirements file, the way setup.py reads it."""
    from packaging.requirements import Requirement
    with open(path) as f:
        lines = [line.split('#')[0].strip() for line in f]
    return {Requirement(line).name.lower(): str(Requirement(line).specifier)
            for line in lines if line}


def test_the_wheel_leaves_mmcv_to_mim_and_keeps_pkg_resources():
    """mmcv must match torch and CUDA (mim picks the wheel), so the package does not force one;
    setuptools < 81 is required because mmengine's ``pkg::`` bases import pkg_resources."""
    runtime = _requirement_names(osp.join(ROOT, 'requirements', 'runtime.txt'))
    assert 'mmcv' not in runtime
    from packaging.specifiers import SpecifierSet
    allowed = SpecifierSet(runtime['setuptools'])
    assert '80.10.2' in allowed and '81.0.0' not in allowed and '84.0.0' not in allowed
    mim = _requirement_names(osp.join(ROOT, 'requirements', 'mminstall.txt'))
    assert '2.1.0' in SpecifierSet(mim['mmcv']) and '2.2.0' not in SpecifierSet(mim['mmcv'])


def test_runtime_requirements_are_imported_by_us_or_by_the_stack_undeclared():
    """Each runtime requirement is imported by dinomamba_mm/, tools/ or configs/ (or a config's
    scope), or imported by an OpenMMLab package that does not declare it (mmseg.utils'
    tokenizer: ftfy, regex; mmengine's ``pkg::`` bases: pkg_resources of setuptools)."""
    modules = {'mmsegmentation': 'mmseg'}
    undeclared_by_the_stack = {'ftfy', 'regex', 'setuptools'}
    sources = ''
    for folder in ('dinomamba_mm', 'tools', 'configs'):
        for path in glob.glob(osp.join(ROOT, folder, '**', '*.py'), recursive=True):
            if '.mim' not in path:
                with open(path) as f:
                    sources += f.read()
    unused = []
    for name in _requirement_names(osp.join(ROOT, 'requirements', 'runtime.txt')):
        module = modules.get(name, name)
        if name in undeclared_by_the_stack:
            continue
        imported = rf'^\s*(import|from) {module}\b'
        config_scope = rf'[\'"]{module}(::|\.[A-Z]|[\'"])'  # 'mmdet::base', 'mmdet.FPN', 'mmdet'
        if not re.search(f'{imported}|{config_scope}', sources, re.MULTILINE):
            unused.append(name)
    assert not unused, f'runtime requirements nothing imports: {unused}'


def test_mmseg_imports_the_undeclared_requirements_we_list():
    """The reason ftfy and regex stay: mmseg.utils imports them at import time."""
    code = ("import sys; sys.modules['ftfy'] = None\n"
            "try:\n    import mmseg.utils\nexcept ImportError as e:\n    print('needs', e.name)")
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          timeout=300)
    assert 'needs ftfy' in proc.stdout, proc.stdout + proc.stderr[-2000:]


_HIDE_MMCV = """
import importlib.metadata as metadata
real_version = metadata.version
def version(name):
    if name == 'mmcv':
        {action}
    return real_version(name)
metadata.version = version
import dinomamba_mm
print('imported')
from dinomamba_mm.install_mmcv import check_mmcv
try:
    check_mmcv()  # what tools/train.py and tools/test.py run first
except ImportError as error:
    print(error)
"""


@pytest.mark.parametrize('action,reason', [
    ('raise metadata.PackageNotFoundError(name)', 'mmcv is not installed'),
    ("return '2.2.0'", 'mmcv 2.2.0 is installed'),
])
def test_a_missing_or_unsupported_mmcv_is_named_with_the_install_command(action, reason):
    """The import itself needs no mmcv (tests/test_registry.py: the first registry lookup that
    does names the command too)."""
    proc = subprocess.run([sys.executable, '-c', _HIDE_MMCV.format(action=action)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    out = proc.stdout + proc.stderr[-2000:]
    assert out.startswith('imported'), out
    assert reason in out and '`python -m dinomamba_mm.install_mmcv`' in out, out


def test_mmcv_without_compiled_ops_is_named_with_the_install_command(tmp_path):
    """An mmcv without ``_ext`` (mmcv-lite, or a source install built without ops)."""
    fake = tmp_path / 'mmcv'
    fake.mkdir()
    (fake / '__init__.py').write_text("__version__ = '2.1.0'\n")
    code = _HIDE_MMCV.format(action="return '2.1.0'")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]))
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=env)
    out = proc.stdout + proc.stderr[-2000:]
    assert out.startswith('imported'), out
    assert 'has no compiled ops' in out and '`python -m dinomamba_mm.install_mmcv`' in out, out
