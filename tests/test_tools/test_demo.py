"""tools/demo.py: its helpers (default suite), the --quick smoke test and the full demo (both
slow: about 1 and 6 minutes on 2 cores); the full demo must show what docs/demo.md claims.

The demo runs read the demo's default data roots (data/synthetic_demo_quick, data/synthetic_demo),
generated when missing.
"""
import io
import json
import os.path as osp
import subprocess
import sys

import pytest
from mmengine.config import Config

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DEMO = osp.join(REPO, 'tools', 'demo.py')
sys.path.insert(0, osp.join(REPO, 'tests'))
from helpers.tools import load_tool  # noqa: E402

demo = load_tool('tools/demo.py')


def _run_demo(work_dir, *extra):
    result = subprocess.run([sys.executable, DEMO, '--work-dir', str(work_dir), *extra],
                            cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def _check_outputs(stdout, work_dir):
    """Every picture and log the closing table names exists, and the table holds the numbers
    of results.json."""
    for path in ('rank/spectra.png', 'rank/token_mixing_rank.md', 'maps.png', 'dino_loss.png',
                 'results.json', 'results.md', 'demo_console.log'):
        assert osp.isfile(osp.join(work_dir, path)), path
    for key in ('dinovim', 'vit', 'linearvit', 'dinovim_random'):
        for path in ('binary_auc.csv', 'roc.png', 'maps.npz'):
            assert osp.isfile(osp.join(work_dir, 'maps', key, path)), (key, path)
    with open(osp.join(work_dir, 'results.json')) as f:
        results = json.load(f)
    assert f'Pictures and logs in {work_dir}' in stdout
    ranks = results['rank']['ranks']
    for model in demo.MODELS:
        assert f'| {model.label} | {model.mixer} | {ranks[model.name]["rank"]:.1f} |' in stdout
        assert f'| {model.label}, DINO |' in stdout
        assert f'{results["auc"][model.name]:.3f} |' in stdout
    for key in ('dinovim', 'dinovim_random'):
        assert 0.0 <= results['top1'][key] <= 100.0
        assert f'| {results["top1"][key]:.1f} | {results["auc"][key]:.3f} |' in stdout
    # the rank bounds hold on any weights: blocks of C = 64, D_QK = N = 16
    assert ranks['linearvit']['rank'] <= 16 and ranks['dinovim']['rank_off'] <= 16
    return results


@pytest.mark.slow
def test_quick_demo(tmp_path):
    work_dir = tmp_path / 'demo_quick'
    stdout = _run_demo(work_dir, '--quick', '--seed', '1')
    results = _check_outputs(stdout, str(work_dir))
    assert '--quick: a smoke test' in stdout
    # a small data set (the full demo's is 4000 / 2000 / 100)
    data_root = osp.join(REPO, 'data', 'synthetic_demo_quick')
    with open(osp.join(data_root, 'cls', 'meta', 'train.txt')) as f:
        assert len(f.read().split('\n')) < 200
    assert results['rank']['holds']
    assert results['checkpoints']['dinovim'] == osp.join(REPO, 'checkpoints/demo/dinovim.pth')


def test_steps_draw_a_tqdm_bar_on_a_terminal_and_one_line_per_step_in_a_log():
    class Terminal(io.StringIO):

        def isatty(self):
            return True

    terminal = Terminal()
    steps = demo.Steps(2, terminal)
    steps.begin('maps', total=4)
    for _ in range(4):
        steps.bar.update()
    steps.bar.refresh()  # tqdm redraws at most every 0.1 s
    steps.end('figure maps.png')
    out = terminal.getvalue()
    assert '[1/2] maps' in out and '4/4' in out and '100%' in out  # tqdm's bar
    assert out.endswith('[1/2] maps: figure maps.png (0s)\n')
    log = io.StringIO()  # not a terminal: no bar, the summary line only
    steps = demo.Steps(1, log)
    steps.begin('synthetic data')
    steps.end('found')
    assert log.getvalue() == '[1/1] synthetic data: found (0s)\n'


def test_set_epochs_shortens_the_schedule():
    cfg = Config.fromfile(osp.join(REPO, 'configs/demo/dino_dinovim-demo_synthetic.py'))
    warmup_end = cfg.param_scheduler[0]['end']
    demo.set_epochs(cfg, warmup_end + 2)
    assert [(s['begin'], s['end']) for s in cfg.param_scheduler] == [
        (0, warmup_end), (warmup_end, warmup_end + 2)]
    assert cfg.param_scheduler[-1]['T_max'] == 2
    assert cfg.train_cfg.max_epochs == cfg.default_hooks.checkpoint.interval == warmup_end + 2
    # no room for the warm-up: a cosine schedule alone
    demo.set_epochs(cfg, 1)
    assert [(s['type'], s['begin'], s['end']) for s in cfg.param_scheduler] == [
        ('CosineAnnealingLR', 0, 1)]


@pytest.mark.parametrize('model', demo.MODELS, ids=lambda m: m.name)
def test_dino_pretraining_keeps_a_checkpoint_of_every_epoch(model):
    # a 17-24 min run killed near its end must resume from the last epoch, not from scratch
    cfg = Config.fromfile(model.dino_config)
    assert cfg.train_cfg.max_epochs > 1
    assert cfg.default_hooks.checkpoint.interval == 1


def test_no_loss_curve_from_a_single_point(tmp_path):
    one_point = tmp_path / 'one.json'
    one_point.write_text(json.dumps(dict(iter=1, loss=5.0)) + '\n')
    out = tmp_path / 'loss.png'
    message = demo.plot_losses({'DinoVim': str(one_point), 'ViT': None}, str(out))
    assert message.startswith('no DINO loss curve') and not out.exists()
    two_points = tmp_path / 'two.json'
    two_points.write_text(json.dumps(dict(iter=1, loss=5.0)) + '\n'
                          + json.dumps(dict(iter=2, lr=0.1)) + '\n'
                          + json.dumps(dict(iter=3, loss=4.0)) + '\n')
    assert demo.plot_losses({'DinoVim': str(two_points)}, str(out)) == str(out)
    assert out.stat().st_size > 0


@pytest.mark.slow
def test_full_demo_shows_the_documented_results(tmp_path):
    work_dir = tmp_path / 'demo'
    stdout = _run_demo(work_dir, '--seed', '0')
    results = _check_outputs(stdout, str(work_dir))
    assert results['rank']['holds']
    # docs/demo.md: the shipped DinoVim teacher probes 6.5-8.8 points above random init on
    # seeds 0-2 (3 asked for); its Binary-AUC is not above random init's, so not asserted
    assert results['top1']['dinovim'] - results['top1']['dinovim_random'] >= 3.0
