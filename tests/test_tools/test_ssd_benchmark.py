"""tools/benchmarks/ssd.py: what it measures under each --malloc mode, and its listing against
the float64 recurrence (the benchmark's reference must itself be right)."""
import math
import os.path as osp
import sys

import pytest
import torch

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(REPO, 'tests'))
from helpers.tools import load_tool  # noqa: E402

from dinomamba_mm.ops.ssd.naive import ssd_scan_naive  # noqa: E402

ssd_benchmark = load_tool('tools/benchmarks/ssd.py')

SHAPE = (1, 9, 2, 4, 4)  # B, L, H, P, N


def test_call_once_reports_memory_only_when_asked():
    inputs = ssd_benchmark.make_inputs(SHAPE, torch.device('cpu'), torch.float32)
    wall, cpu, mib = ssd_benchmark.call_once(ssd_benchmark.ours_bidirectional, inputs,
                                             torch.device('cpu'), True, memory=False)
    assert wall > 0 and cpu >= 0
    assert math.isnan(mib)
    assert ssd_benchmark._fmt(mib) == 'n/a'
    *_, mib = ssd_benchmark.call_once(ssd_benchmark.ours_bidirectional, inputs,
                                      torch.device('cpu'), False, memory=True)
    assert not math.isnan(mib)


def test_minimal_listing_matches_the_float64_recurrence():
    inputs = ssd_benchmark.make_inputs(SHAPE, torch.device('cpu'), torch.float32)
    y_fwd, y_bwd = ssd_benchmark.minimal_bidirectional(**inputs)
    for k, (y, reverse) in enumerate(((y_fwd, False), (y_bwd, True))):
        expected = ssd_scan_naive(inputs['x'][k], inputs['dt'][k], inputs['A'][k], inputs['B'][k],
                             inputs['C'][k], D=inputs['D'][k], dt_bias=inputs['dt_bias'][k],
                             dt_softplus=True, reverse=reverse)
        torch.testing.assert_close(y.double(), expected, rtol=1e-4, atol=1e-5)


def test_adaptive_malloc_leaves_the_memory_columns_empty(capsys):
    ssd_benchmark.run([SHAPE], torch.device('cpu'), torch.float32, repeats=1,
                      with_sequential=False, with_mamba_ssm=False, memory=False)
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith(f'| {SHAPE[0]} | {SHAPE[1]} |')]
    assert [row.split('|')[3].strip() for row in rows] == [
        'ours', "ours' products alone", 'minimal x2 (flips)']
    for row in rows:
        cells = [cell.strip() for cell in row.split('|')[1:-1]]
        assert cells[5] == 'n/a' and cells[8] == 'n/a'  # fwd MiB, fwd+bwd MiB
        assert cells[3] != 'n/a' and cells[6] != 'n/a'  # fwd ms, fwd+bwd ms


def test_malloc_mode_is_checked():
    with pytest.raises(SystemExit):
        ssd_benchmark.main(['--malloc', 'default'])


def test_products_alone_are_every_product_of_ours():
    """The floor replays ours' products, forward and backward: their FLOPs, counted by hand for
    2 chunks of Q = 50 (the CPU cap of 64 tokens on L = 100), R = 2 directions x 1 row, H = 2,
    G = 1, P = N = 4; the first chunk's zero state and the last chunk's unused one are skipped."""
    R, H, G, nc, Q, P, N = 2, 2, 1, 2, 50, 4, 4
    cb = 2 * R * G * nc * Q * N * Q  # C B^T of every chunk
    diag = 2 * R * H * nc * Q * Q * P  # (mask o CB) x_dt
    state = 2 * R * G * (nc - 1) * N * Q * (H // G) * P  # B^T x_dt of every chunk but the last
    off = 2 * R * G * (nc - 1) * Q * N * (H // G) * P  # C H of every chunk but the first
    inputs = ssd_benchmark.make_inputs((1, 100, H, P, N), torch.device('cpu'), torch.float32)
    products = ssd_benchmark.products_of_ours(inputs)
    assert products.gflop['fwd'] * 1e9 == pytest.approx(cb + diag + state + off)
    assert products.gflop['bwd'] * 1e9 == pytest.approx(2 * diag + 2 * cb + 2 * state + 2 * off)
    wall, _, _ = ssd_benchmark.call_once(products, inputs, torch.device('cpu'), True,
                                         memory=False)
    assert wall > 0
