"""What a user gets from the source distribution, and the tools' command-line help."""
import ast
import glob
import os
import os.path as osp
import shutil
import subprocess
import sys
import tarfile

import pytest

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
SOURCE_ITEMS = ('setup.py', 'MANIFEST.in', 'LICENSE', 'README.md', 'Makefile', 'pytest.ini',
                'model-index.yml', 'requirements', 'configs', 'tools', 'tests', 'docs',
                'dinomamba_mm')
IGNORED = shutil.ignore_patterns('__pycache__', '*.pyc', '.mim', '*.egg-info')


def _files(root: str, *folders: str) -> set:
    found = set()
    for folder in folders:
        for path in glob.glob(osp.join(root, folder, '**', '*'), recursive=True):
            if osp.isfile(path) and '__pycache__' not in path and not path.endswith('.pyc'):
                found.add(osp.relpath(path, root))
    return found


def test_sdist_ships_the_tests_docs_configs_and_tools(tmp_path):
    """Built from a copy of the checkout (setup.py writes dinomamba_mm/.mim while building)."""
    source = tmp_path / 'source'
    source.mkdir()
    for item in SOURCE_ITEMS:
        src = osp.join(ROOT, item)
        if osp.isdir(src):
            shutil.copytree(src, source / item, ignore=IGNORED)
        else:
            shutil.copy(src, source / item)
    proc = subprocess.run([sys.executable, 'setup.py', '-q', 'sdist', '--dist-dir',
                           str(tmp_path / 'dist')], cwd=str(source), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (archive, ) = glob.glob(str(tmp_path / 'dist' / '*.tar.gz'))
    with tarfile.open(archive) as tar:
        shipped = {name.split('/', 1)[1] for name in tar.getnames() if '/' in name}
    expected = _files(ROOT, 'tests', 'docs', 'configs', 'tools', 'requirements') | {
        'LICENSE', 'README.md', 'Makefile', 'pytest.ini', 'model-index.yml', 'setup.py'}
    missing = sorted(expected - shipped)
    assert not missing, f'not in the sdist: {missing}'


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
