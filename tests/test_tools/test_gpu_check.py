"""tools/benchmarks/gpu_check.py: its CPU rehearsal runs every part, a part is stopped at its
budget with what it printed kept, failures are printed when they happen, bad options are named."""
import os
import os.path as osp
import subprocess
import sys
import time

import pytest

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(REPO, 'tests'))
from helpers.tools import load_tool  # noqa: E402

gpu_check = load_tool('tools/benchmarks/gpu_check.py')


def test_the_tiny_rehearsal_runs_every_part(tmp_path):
    """``--device cpu --tiny``: every part ok, and each log shows its checks ran (not skipped)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [REPO] + [p for p in [os.environ.get('PYTHONPATH')] if p]))
    result = subprocess.run([sys.executable, osp.join(REPO, 'tools/benchmarks/gpu_check.py'),
                             '--device', 'cpu', '--tiny', '--out', str(tmp_path)], env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    logs = {name: (tmp_path / f'{name}.log').read_text() for name in 'abcd'}
    summary = (tmp_path / 'summary.md').read_text()
    for part, title in gpu_check.PARTS.items():
        assert f'| {part} {title} | ok |' in summary, summary
    assert 'import mamba_ssm Triton ops: ok' in (tmp_path / 'setup.log').read_text()
    assert ' passed' in logs['a'] and 'skipped' not in logs['a'], logs['a'][-2000:]
    assert 'test_matches_mamba_chunk_scan_combined[bf16-65] PASSED' in logs['a']
    for method in ('ours chunk 64', 'ours chunk 128', 'ours chunk 256', 'mamba_ssm x2 (flips)'):
        assert f'| 1 | 65 | 2 | {method} |' in logs['b'], logs['b']
    assert '| 32 | 5 |' in logs['c'] and 'DinoVim-T / DeiT-T time' in logs['c'], logs['c']
    assert '2 passed' in logs['d'], logs['d'][-2000:]


def test_a_part_is_stopped_at_its_budget_and_keeps_its_output(tmp_path):
    tee = gpu_check.Tee(str(tmp_path / 'part.log'))
    began = time.monotonic()
    status, _ = gpu_check.run_part(
        ['-c', "print('started', flush=True); import time; time.sleep(120)"], {}, 2.0, tee)
    tee.close()
    assert status == 'stopped' and time.monotonic() - began < 30
    assert (tmp_path / 'part.log').read_text() == 'started\n'


def test_a_part_that_fails_reports_its_exit_code(tmp_path):
    tee = gpu_check.Tee(str(tmp_path / 'part.log'))
    assert gpu_check.run_part(['-c', 'raise SystemExit(3)'], {}, 60.0, tee) == ('failed', 3)
    assert gpu_check.run_part(['-c', 'pass'], {}, 60.0, tee) == ('ok', 0)
    tee.close()


def test_a_failing_test_is_printed_when_it_fails(tmp_path):
    """The pytest parts run with this module as a plugin: the failure's message comes before the
    next test starts, so a part stopped later keeps it."""
    (tmp_path / 'test_probe.py').write_text(
        'def test_off():\n    assert 0.5 <= 0.1, {"dA": 0.5}\n\n'
        'def test_next():\n    print("next ran")\n')
    tee = gpu_check.Tee(str(tmp_path / 'part.log'))
    status, code = gpu_check.run_part(
        gpu_check.PYTEST + ['-s', '--rootdir', str(tmp_path), str(tmp_path / 'test_probe.py')],
        {}, 120.0, tee)
    tee.close()
    log = (tmp_path / 'part.log').read_text()
    assert (status, code) == ('failed', 1)
    failure = log.index('test_probe.py::test_off FAILED (call):')
    assert "{'dA': 0.5}" in log[failure:] and failure < log.index('next ran')


@pytest.mark.parametrize('value, message', [
    ('x=5', "the part must be one of \\['a', 'b', 'c', 'd'\\]"),
    ('a=soon', 'expected PART=SECONDS'), ('a=0', 'the seconds must be > 0')])
def test_a_bad_budget_is_named(value, message):
    with pytest.raises(ValueError, match=message):
        gpu_check.parse_budgets([value], tiny=False)


def test_budgets_default_and_override():
    budgets = gpu_check.parse_budgets(['c=300'], tiny=False)
    assert budgets == {**{p: float(s) for p, s in gpu_check.BUDGETS.items()}, 'c': 300.0}
    assert set(gpu_check.parse_budgets([], tiny=True).values()) == {float(gpu_check.TINY_BUDGET)}


@pytest.mark.parametrize('argv, message', [
    (['--device', 'cpu'], '--device cpu needs --tiny'),
    (['--tiny'], '--tiny is the CPU rehearsal')])
def test_the_rehearsal_and_the_gpu_run_are_not_mixed(argv, message, capsys):
    with pytest.raises(SystemExit):
        gpu_check.main(argv)
    assert message in capsys.readouterr().err


def test_the_gpu_commands_select_what_the_parts_promise(tmp_path):
    """What runs only on a GPU, checked here: the pytest parts collect the GPU tests (a: every
    case of test_ssd_gpu.py; d: the two 'full' training steps), the backbone part's options
    parse, and DinoVim runs our kernels in parts c and d."""
    def collected(part):
        argv, env = gpu_check.part_command(part, 'cuda', tiny=False)
        tee = gpu_check.Tee(str(tmp_path / f'{part}.log'))
        status, _ = gpu_check.run_part(argv + ['--collect-only', '-qq'], env, 300.0, tee)
        tee.close()
        lines = (tmp_path / f'{part}.log').read_text().splitlines()
        assert status == 'ok', lines[-20:]
        return [line for line in lines if '::' in line]

    assert len(collected('a')) == 56
    assert collected('d') == [
        'tests/test_runner/test_training_steps.py::test_a_few_iterations_train[dino-full]',
        'tests/test_runner/test_training_steps.py::test_a_few_iterations_train[upernet-full]']
    argv, env = gpu_check.part_command('c', 'cuda', tiny=False)
    backbones = load_tool('tools/benchmarks/backbones.py')
    options = backbones.build_parser().parse_args(argv[1:])
    assert (options.sizes, options.batch, options.amp, options.device) == (
        [224, 512, 1024, 1248], 8, True, 'cuda')
    assert options.models == ['DinoVim-T', 'DeiT-T', 'DinoVim-S', 'DeiT-S', 'DinoVim-B',
                              'DeiT-B']
    assert env == {'DINOMAMBA_SSD_IMPL': 'triton'} == gpu_check.part_command('d', 'cuda', False)[1]
