"""tools/benchmarks/backbones.py: its tables, a worker's measurement and the mixer profile."""
import json
import os.path as osp
import re
import sys

import pytest
import torch

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(REPO, 'tests'))
from helpers.tools import load_tool  # noqa: E402

backbones_benchmark = load_tool('tools/benchmarks/backbones.py')


def printed_report(capsys, results: dict, models: list, sizes: list) -> str:
    """What ``report`` prints for the forward pass's wall time."""
    backbones_benchmark.report(results, models, ['fwd'], sizes, 'ms', 'wall time', 'batch 8')
    return capsys.readouterr().out


def test_report_prints_ratios_and_the_growth_exponent(capsys):
    # ViT's time grows 4x for 4x the tokens (exponent 1), DinoVim's 2x (exponent 0.5)
    results = {('DinoVim-T', 'fwd', 224): dict(tokens=100, ms=20.0, peak_mb=4.0),
               ('DinoVim-T', 'fwd', 448): dict(tokens=400, ms=40.0, peak_mb=8.0),
               ('ViT', 'fwd', 224): dict(tokens=100, ms=10.0, peak_mb=2.0),
               ('ViT', 'fwd', 448): dict(tokens=400, ms=40.0, peak_mb=16.0)}
    out = printed_report(capsys, results, ['DinoVim-T', 'ViT'], [224, 448])
    assert '| 224 | 100 | 20.0 | 4 | 10.0 | 2 | 2.00 | 2.00 |' in out
    assert '| 448 | 400 | 40.0 | 8 | 40.0 | 16 | 1.00 | 0.50 |' in out
    assert 'growth exponent of wall time in tokens (224->448 px): DinoVim-T 0.50, ViT 1.00' in out


def test_report_leaves_out_the_sizes_a_model_did_not_finish(capsys):
    results = {('DinoVim-T', 'fwd', 224): dict(tokens=197, ms=20.0, peak_mb=1.0),
               ('ViT', 'fwd', 224): dict(tokens=197, ms=10.0, peak_mb=1.0),
               ('ViT', 'fwd', 448): dict(tokens=785, ms=30.0, peak_mb=1.0)}
    out = printed_report(capsys, results, ['DinoVim-T', 'ViT'], [224, 448])
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


def test_each_dinovim_is_compared_with_its_deit(capsys):
    """Ratios per pair (DinoVim-S / DeiT-S, ...); a model run at a smaller batch (out of memory)
    is compared per image, without a memory ratio."""
    results = {('DinoVim-S', 'fwd', 224): dict(tokens=197, ms=30.0, peak_mb=6.0, batch=8),
               ('DeiT-S', 'fwd', 224): dict(tokens=197, ms=10.0, peak_mb=3.0, batch=8),
               ('DinoVim-S', 'fwd', 1248): dict(tokens=6085, ms=40.0, peak_mb=9.0, batch=4),
               ('DeiT-S', 'fwd', 1248): dict(tokens=6085, ms=160.0, peak_mb=90.0, batch=8)}
    out = printed_report(capsys, results, ['DinoVim-S', 'DeiT-S'], [224, 1248])
    assert 'DinoVim-S / DeiT-S time | DinoVim-S / DeiT-S memory |' in out
    assert '| 224 | 197 | 30.0 | 6 | 10.0 | 3 | 3.00 | 2.00 |' in out
    assert '| 1248 | 6085 | 40.0 (batch 4) | 9 | 160.0 | 90 | 0.50 |  |' in out


def test_a_size_out_of_memory_is_retried_at_half_the_batch(capsys, monkeypatch):
    class Greedy(torch.nn.Module):  # runs out of memory above 2 images
        def forward(self, img):
            if img.shape[0] > 2:
                raise torch.OutOfMemoryError('stand-in')
            return (img.mean((1, 2, 3)), )

    monkeypatch.setattr(backbones_benchmark, 'build', lambda name: Greedy())
    backbones_benchmark.worker('DeiT-B', 'fwd', [32], repeats=1, point_seconds=1.0, threads=1,
                               batch=8)
    row = json.loads(capsys.readouterr().out)
    assert (row['model'], row['size'], row['batch']) == ('DeiT-B', 32, 2)


def test_dinovim_and_deit_sizes_build():
    sizes = {name: backbones_benchmark.build(name).embed_dims
             for name in ('DinoVim-S', 'DinoVim-B', 'DeiT-T', 'DeiT-S', 'DeiT-B')}
    assert sizes == {'DinoVim-S': 512, 'DinoVim-B': 768, 'DeiT-T': 192, 'DeiT-S': 384,
                     'DeiT-B': 768}
