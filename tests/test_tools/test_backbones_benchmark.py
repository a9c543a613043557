"""tools/benchmarks/backbones.py: its tables, a worker's measurement and the mixer profile."""
import json
import os.path as osp
import re
import sys

import pytest

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(REPO, 'tests'))
from helpers.tools import load_tool  # noqa: E402

backbones_benchmark = load_tool('tools/benchmarks/backbones.py')


def test_report_prints_ratios_and_the_growth_exponent(capsys):
    # ViT's time grows 4x for 4x the tokens (exponent 1), DinoVim's 2x (exponent 0.5)
    results = {('DinoVim-T', 'fwd', 224): dict(tokens=100, ms=20.0, peak_mb=4.0),
               ('DinoVim-T', 'fwd', 448): dict(tokens=400, ms=40.0, peak_mb=8.0),
               ('ViT', 'fwd', 224): dict(tokens=100, ms=10.0, peak_mb=2.0),
               ('ViT', 'fwd', 448): dict(tokens=400, ms=40.0, peak_mb=16.0)}
    backbones_benchmark.report(results, ['DinoVim-T', 'ViT'], ['fwd'], [224, 448], 'ms',
                               'wall time', 'batch 1')
    out = capsys.readouterr().out
    assert '| 224 | 100 | 20.0 | 4 | 10.0 | 2 | 2.00 | 2.00 |' in out
    assert '| 448 | 400 | 40.0 | 8 | 40.0 | 16 | 1.00 | 0.50 |' in out
    assert 'growth exponent of wall time in tokens (224->448 px): DinoVim-T 0.50, ViT 1.00' in out


def test_report_leaves_out_the_sizes_a_model_did_not_finish(capsys):
    results = {('DinoVim-T', 'fwd', 224): dict(tokens=197, ms=20.0, peak_mb=1.0),
               ('ViT', 'fwd', 224): dict(tokens=197, ms=10.0, peak_mb=1.0),
               ('ViT', 'fwd', 448): dict(tokens=785, ms=30.0, peak_mb=1.0)}
    backbones_benchmark.report(results, ['DinoVim-T', 'ViT'], ['fwd'], [224, 448], 'ms',
                               'wall time', 'batch 1')
    out = capsys.readouterr().out
    assert 'sizes [448] left out' in out and '| 448 |' not in out


def test_worker_prints_one_measurement_per_size(capsys):
    backbones_benchmark.worker('LinearViT', 'fwd+bwd', [32, 48], repeats=1, point_seconds=1.0,
                               threads=1)
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r['model'], r['mode'], r['size'], r['tokens']) for r in rows] == [
        ('LinearViT', 'fwd+bwd', 32, 5), ('LinearViT', 'fwd+bwd', 48, 10)]
    assert all(r['runs'] == 1 and r['cpu_ms'] > 0 and r['peak_mb'] >= 0 for r in rows)


def test_saved_tensors_lists_what_a_dinovim_block_keeps():
    """Hand count per token (float32, DinoVim-T: width 256, d_inner 512, in_proj 1160 wide):
    in_proj's output, y of both directions (one storage) and out_proj's input, the block input,
    RMSNorm's normalised input and in_proj's input (tensors with a token axis; the parameters'
    copies, e.g. the convs' stacked taps, do not grow with the tokens)."""
    table = backbones_benchmark.saved_tensors('DinoVim-T', 64)
    tokens = re.search(r'\((\d+) tokens\)', table).group(1)
    large = sorted((int(line.split('|')[1]) for line in table.splitlines()[2:-1]
                    if int(line.split('|')[1]) >= 1000
                    and tokens in line.split('|')[2].strip(' ()').split(', ')), reverse=True)
    assert large == [4 * 1160, 2 * 4 * 512, 4 * 512] + [4 * 256] * 3, table


def test_unknown_model_is_named():
    with pytest.raises(ValueError, match="unknown model 'Mamba'"):
        backbones_benchmark.build('Mamba')


def test_mixer_profile_is_torch_profilers_operator_table():
    table = backbones_benchmark.profile_mixer(32)
    assert 'Self CPU' in table and 'aten::' in table
