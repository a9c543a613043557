"""``python -m dinomamba_mm TOOL``: runs the installed copy of tools/TOOL.py (what
``mim run dinomamba_mm TOOL`` runs) from any folder, without openmim."""
import glob
import os
import os.path as osp
import subprocess
import sys

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


def _run(args, cwd):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT, *filter(None, [os.environ.get('PYTHONPATH')])]))
    return subprocess.run([sys.executable, '-m', 'dinomamba_mm', *args], cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=300)


def test_lists_every_tool_by_its_file_name(tmp_path, mim_links):
    proc = _run([], tmp_path)
    assert proc.returncode == 2
    (listed, ) = [line for line in proc.stdout.splitlines() if line.startswith('tools: ')]
    expected = {osp.splitext(osp.basename(p))[0]
                for p in glob.glob(osp.join(ROOT, 'tools', '**', '*.py'), recursive=True)}
    assert set(listed.split()[1:]) == expected


def test_runs_a_tool_with_its_arguments_from_another_folder(tmp_path, mim_links):
    """make_synthetic writes its dataset where it is told, relative to the caller's folder."""
    proc = _run(['make_synthetic', '--out', 'synthetic', '--seed', '0', '--num-train', '2',
                 '--num-val', '1', '--layouts', 'cls'], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert glob.glob(str(tmp_path / 'synthetic' / 'cls' / 'train' / '*' / '*.JPEG'))
    proc = _run(['train', '--help'], tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith('usage: train.py'), proc.stderr


def test_an_unknown_tool_is_named_with_the_tools(tmp_path, mim_links):
    proc = _run(['trian'], tmp_path)
    assert proc.returncode == 1
    assert "no tool named 'trian'; the tools: " in proc.stderr and ' train' in proc.stderr
