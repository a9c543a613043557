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
    assert ssd_benchmark.fmt(mib) == 'n/a'
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
                      with_sequential=True, with_mamba_ssm=False, memory=False)
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith(f'| {SHAPE[0]} | {SHAPE[1]} | {SHAPE[2]} |')]
    assert [row.split('|')[4].strip() for row in rows] == [
        'ours', 'minimal x2 (flips)', 'sequential']
    for row in rows:
        cells = [cell.strip() for cell in row.split('|')[1:-1]]
        assert cells[6] == 'n/a' and cells[9] == 'n/a'  # fwd MiB, fwd+bwd MiB
        assert cells[4] != 'n/a' and cells[7] != 'n/a'  # fwd ms, fwd+bwd ms


def test_inference_table_has_the_forward_only(capsys):
    ssd_benchmark.run([SHAPE], torch.device('cpu'), torch.float32, repeats=1,
                      with_sequential=False, with_mamba_ssm=False, backward=False)
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith('| B |'))
    assert 'fwd+bwd' not in header and header.count('|') == 9
    assert 'max relative difference of the forward outputs to ours' in out


def test_malloc_mode_is_checked():
    with pytest.raises(SystemExit):
        ssd_benchmark.main(['--malloc', 'default'])


def test_a_gpu_is_warmed_up_at_every_length():
    """Its first call compiles and autotunes the Triton kernels: never a timed round (it was for
    L > 785 before, as on CPU)."""
    assert ssd_benchmark.timing_rounds(4096, torch.device('cuda'), 10) == (10, True)
    assert ssd_benchmark.timing_rounds(4096, torch.device('cpu'), 10) == (1, False)
    assert ssd_benchmark.timing_rounds(197, torch.device('cpu'), 10) == (10, True)


def test_one_row_per_chunk_size_and_speed_ups_against_a_chosen_reference(capsys, monkeypatch):
    """Without the minimal listing the speed-ups are against mamba_ssm x2 (here a stand-in: our
    own op at chunk 32, so that the test needs no GPU)."""
    monkeypatch.setattr(ssd_benchmark, 'mamba_ssm_bidirectional', ssd_benchmark.ours_at(32))
    ssd_benchmark.run([SHAPE], torch.device('cpu'), torch.float32, repeats=1,
                      with_sequential=False, with_mamba_ssm=True, memory=False,
                      chunk_sizes=(4, 8), with_minimal=False)
    out = capsys.readouterr().out
    rows = [line.split('|')[4].strip() for line in out.splitlines()
            if line.startswith(f'| {SHAPE[0]} | {SHAPE[1]} | {SHAPE[2]} |')]
    assert rows == ['ours chunk 4', 'ours chunk 8', 'mamba_ssm x2 (flips)']
    assert 'speed-up = mamba_ssm x2 (flips) / method' in out
    reference = next(line for line in out.splitlines() if 'mamba_ssm x2 (flips) |' in line)
    assert reference.split('|')[-3].strip() == '1.00x / 1.00x'
    with pytest.raises(ValueError, match='with_minimal=False needs with_mamba_ssm=True'):
        ssd_benchmark.run([SHAPE], torch.device('cpu'), torch.float32, repeats=1,
                          with_sequential=False, with_mamba_ssm=False, with_minimal=False)
