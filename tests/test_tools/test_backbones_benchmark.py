"""tools/benchmarks/backbones.py: its DinoVim-T+ssd-products variant runs the SSD scan's batched
products and nothing else of the scan."""
import os.path as osp
import sys

import pytest
import torch

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(REPO, 'tests'))
from helpers.tools import load_tool  # noqa: E402

from dinomamba_mm.models.layers import bidirectional_mamba2 as mixer_module  # noqa: E402

backbones_benchmark = load_tool('tools/benchmarks/backbones.py')
ssd_benchmark = load_tool('tools/benchmarks/ssd.py')


def test_products_only_scan_runs_the_forward_products_and_returns_zeros(monkeypatch):
    # restored after the test: scan_products_only replaces the mixer module's scan
    monkeypatch.setattr(mixer_module, 'ssd_scan_bidirectional',
                        mixer_module.ssd_scan_bidirectional)
    backbones_benchmark.scan_products_only()
    inputs = ssd_benchmark.make_inputs((1, 100, 2, 4, 4), torch.device('cpu'), torch.float32)
    kwargs = dict(dt=inputs['dt'], A=inputs['A'], B=inputs['B'], C=inputs['C'], chunk_size=64,
                  D=inputs['D'], dt_bias=inputs['dt_bias'], dt_softplus=True)
    with torch.no_grad():
        mixer_module.ssd_scan_bidirectional(x=inputs['x'], **kwargs)  # records
        recorder = ssd_benchmark._RecordProducts()
        with recorder:
            y_fwd, y_bwd = mixer_module.ssd_scan_bidirectional(x=inputs['x'], **kwargs)
    assert not y_fwd.any() and not y_bwd.any()
    assert y_fwd.shape == y_bwd.shape == inputs['x'][0].shape
    # forward FLOPs by hand: 2 chunks of Q = 50 (chunk_size 64 on L = 100), 2 directions, H = 2,
    # G = 1, P = N = 4; no state product for the last chunk, no off-diagonal one for the first
    R, H, nc, Q, P, N = 2, 2, 2, 50, 4, 4
    expected = (2 * R * nc * Q * N * Q + 2 * R * H * nc * Q * Q * P
                + 2 * (2 * R * (nc - 1) * N * Q * H * P))
    flops = sum(2 * a[0] * a[1] * a[2] * b[2] for (a, _), (b, _) in recorder.calls['fwd'])
    assert flops == pytest.approx(expected)


def test_products_only_variant_is_forward_only():
    with pytest.raises(ValueError, match='forward on CPU only'):
        backbones_benchmark.worker('DinoVim-T+ssd-products', 'fwd+bwd', [32], 1, 1.0, 1)


def test_products_only_variant_refuses_cuda():
    with pytest.raises(ValueError, match='forward on CPU only'):
        backbones_benchmark.worker('DinoVim-T+ssd-products', 'fwd', [32], 1, 1.0, 1, 'cuda')


def test_report_leaves_out_the_variant_where_it_is_not_run(capsys):
    # named with --device cuda, the CPU-only variant has no results: the other models' table
    # must still be printed, not every size left out
    row = dict(tokens=197, cpu_ms=10.0, ms=10.0, peak_mb=1.0)
    results = {('DinoVim-T', 'fwd', 224): dict(row, ms=20.0), ('ViT', 'fwd', 224): row}
    backbones_benchmark.report(results, ['DinoVim-T', 'DinoVim-T+ssd-products', 'ViT'], ['fwd'],
                               [224], 'ms', 'wall time', 'batch 1', 'cuda')
    out = capsys.readouterr().out
    assert 'left out' not in out
    assert '| 224 | 197 | 20.0 | 1 | 10.0 | 1 | 2.00 | 1.00 |' in out
