"""tools/demo.py end to end: --quick (smoke test) and the full demo (DINO must beat random init).

Both run minutes on 2 CPU cores, hence slow-marked (`make test-slow` / `pytest -m slow`).
They use the demo's default data root (data/synthetic_demo, generated when missing).
"""
import json
import os.path as osp
import subprocess
import sys

import pytest

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DEMO = osp.join(REPO, 'tools', 'demo.py')


def _run_demo(work_dir, *extra):
    result = subprocess.run([sys.executable, DEMO, '--work-dir', str(work_dir), *extra],
                            cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def _check_outputs(stdout, work_dir, epochs):
    assert '| DINO teacher |' in stdout and '| random init |' in stdout
    assert f'work dir: {work_dir}' in stdout
    for path in (f'dino/epoch_{epochs[0]}.pth', f'probe_dino/epoch_{epochs[1]}.pth',
                 f'probe_random/epoch_{epochs[1]}.pth', 'binary_auc_dino/binary_auc.csv',
                 'binary_auc_random/binary_auc.csv', 'binary_auc_dino/roc.png',
                 'plots/dino_loss.png', 'results.json', 'results.md', 'demo_console.log'):
        assert osp.isfile(osp.join(work_dir, path)), path
    with open(osp.join(work_dir, 'results.json')) as f:
        results = json.load(f)['results']
    for key in ('dino', 'random'):
        assert 0.0 <= results[key]['top1'] <= 100.0
        assert 0.0 <= results[key]['auc'] <= 1.0
        # the printed table holds the same numbers as results.json
        assert f"{results[key]['top1']:.1f} | {results[key]['auc']:.3f} |" in stdout
    return results


@pytest.mark.slow
def test_demo_quick(tmp_path):
    work_dir = tmp_path / 'demo_quick'
    stdout = _run_demo(work_dir, '--quick', '--seed', '1')
    _check_outputs(stdout, str(work_dir), epochs=(1, 1))
    assert '--quick' in stdout


@pytest.mark.slow
def test_demo_full_dino_beats_random_init(tmp_path):
    work_dir = tmp_path / 'demo'
    stdout = _run_demo(work_dir, '--seed', '0')
    results = _check_outputs(stdout, str(work_dir), epochs=(10, 20))
    assert results['dino']['top1'] > results['random']['top1']
