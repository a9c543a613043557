"""tools/benchmarks/demo_steps.py: its 'before' variants are the demo's steps as they were, and a
quick run times both variants of each step and checks that they agree."""
import os.path as osp
import subprocess
import sys

import pytest
from mmengine.config import Config
from mmengine.registry import DefaultScope

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(REPO, 'tests'))
sys.path.insert(0, osp.join(REPO, 'tools', 'benchmarks'))
from helpers.tools import load_tool  # noqa: E402

benchmark = load_tool('tools/benchmarks/demo_steps.py')
SEGMENTATION_CONFIG = osp.join(REPO, 'configs/demo/linear-seg_features-demo_synthetic.py')
PROBE_CONFIG = osp.join(REPO, 'configs/demo/linear-probe_features-demo_synthetic.py')


def test_the_segmentation_before_is_mmsegs_fcn_head_packing_every_serving():
    import dinomamba_mm  # noqa: F401
    from mmseg.models.decode_heads import FCNHead
    from mmseg.registry import MODELS
    cfg = Config.fromfile(SEGMENTATION_CONFIG)
    cfg.merge_from_dict(dict(benchmark.PACK_EVERY_SERVING,
                             **{'model.decode_head': benchmark.FCN_HEAD}))
    with DefaultScope.overwrite_default_scope('mmseg'):
        head = MODELS.build(cfg.model.decode_head)
    assert type(head) is FCNHead
    assert head.num_convs == 0 and not head.concat_input and head.dropout is None
    assert (head.conv_seg.in_channels, head.conv_seg.out_channels) == (96, 8)
    assert head.conv_seg.kernel_size == (1, 1) and not head.align_corners
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        assert cfg[loader].dataset.pack_once is False
    as_shipped = Config.fromfile(SEGMENTATION_CONFIG)
    assert as_shipped.model.decode_head.type == 'dinomamba_mm.LinearSegHead'
    assert as_shipped.train_dataloader.dataset.pack_once is True


def test_the_probe_before_packs_every_serving():
    cfg = Config.fromfile(PROBE_CONFIG)
    assert cfg.train_dataloader.dataset.pack_once is True
    cfg.merge_from_dict(benchmark.PACK_EVERY_SERVING)
    assert cfg.train_dataloader.dataset.pack_once is False
    assert cfg.test_dataloader.dataset.pack_once is False


def test_a_round_count_below_one_is_refused(capsys):
    with pytest.raises(SystemExit):
        benchmark.parse_args(['--rounds', '0'])
    assert '--rounds must be >= 1, got 0' in capsys.readouterr().err


def test_a_quick_run_times_both_variants_of_each_step(tmp_path):
    result = subprocess.run(
        [sys.executable, osp.join(REPO, 'tools/benchmarks/demo_steps.py'), '--quick',
         '--rounds', '1', '--scenes', '8', '--probe-epochs', '2', '--seg-epochs', '1',
         '--work-dir', str(tmp_path)], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert ' CPUs | python ' in lines[0] and ' threads)' in lines[0]  # the machine line
    rows = {line.split('|')[1].strip(): [cell.strip() for cell in line.split('|')[2:-1]]
            for line in lines if line.startswith('| ') and not line.startswith('| step')}
    assert set(rows) == {'maps', 'probe', 'segmentation'}
    for step, (before, now, ratio, results) in rows.items():
        before_wall, now_wall = (float(cell.split(' / ')[0]) for cell in (before, now))
        assert before_wall > 0 and now_wall > 0
        # the walls are printed to 0.1 s, the ratio to 0.01
        low = (before_wall - 0.05) / (now_wall + 0.05)
        high = (before_wall + 0.05) / (now_wall - 0.05)
        assert low - 0.005 <= float(ratio) <= high + 0.005, (step, before, now, ratio)
    maps_before, maps_now = (float(v) for v in rows['maps'][3].split(' / '))
    assert 0 < maps_before < 1 and maps_before == pytest.approx(maps_now, abs=1e-4)
    probe_before, probe_now = rows['probe'][3].split(' / ')
    assert probe_before == probe_now
    assert 'largest AUC difference between the variants' in result.stdout
    assert osp.isfile(tmp_path / 'benchmark_console.log')
