"""tools/test.py's options (mmpretrain's) applied to configs of the three scopes.

The oracle is what each scope's own hook / TTA wrapper expects (mmpretrain's VisualizationHook
enable/out_dir, mmseg's SegVisualizationHook draw + visualizer.save_dir, mmdet's
DetVisualizationHook draw/test_out_dir; mmpretrain's flip TTA), written out by hand.
"""
import os.path as osp
import sys

import pytest
from mmengine.config import Config

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
PROBE = osp.join(ROOT, 'configs/dino/benchmarks',
                 'dinovim-tiny-p16_dino-ours_8xb128-linear-coslr-100e_in1k.py')
SEG = osp.join(ROOT, 'configs/dinovim_b_ade20k.py')
DET = osp.join(ROOT, 'configs/coco',
               'cascade-mask-rcnn_dinovim-tiny-p16_paper-teacher_16xb4-amp-lsj-100e_coco.py')


sys.path.insert(0, osp.join(ROOT, 'tests'))
from helpers.tools import load_tool  # noqa: E402

tool = load_tool('tools/test.py')


def merged(config, *options):
    args = tool.parse_args([config, 'ckpt.pth', *options])
    return tool.merge_args(Config.fromfile(config), args)


def test_mmpretrain_options():
    cfg = merged(PROBE, '--show-dir', 'vis', '--interval', '3', '--wait-time', '0.5', '--amp',
                 '--no-amp-fallback', '--no-pin-memory', '--tta')
    hook = cfg.default_hooks.visualization
    assert (hook.enable, hook.out_dir, hook.interval, hook.wait_time, hook.show) == \
        (True, 'vis', 3, 0.5, False)
    assert cfg.test_cfg.fp16 is True
    assert cfg.test_dataloader.pin_memory is False
    assert cfg.load_from == 'ckpt.pth' and cfg.resume is False
    # mmpretrain's default TTA: the image and its flip, class scores averaged
    assert cfg.model.type == 'mmpretrain.AverageClsScoreTTA'
    assert cfg.model.module.type == Config.fromfile(PROBE).model.type
    last = cfg.test_dataloader.dataset.pipeline[-1]
    assert last.type == 'TestTimeAug'
    assert [t['prob'] for t in last.transforms[0]] == [1., 0.]
    assert last.transforms[1][0]['type'] == 'PackInputs'


def test_mmseg_visualization_and_tta():
    cfg = merged(SEG, '--show-dir', 'vis', '--tta')
    hook = cfg.default_hooks.visualization
    assert hook.draw is True and cfg.visualizer.save_dir == 'vis'
    original = Config.fromfile(SEG)
    assert cfg.model.type == original.tta_model.type
    assert cfg.model.module.type == original.model.type
    assert cfg.test_dataloader.dataset.pipeline == original.tta_pipeline


def test_mmdet_visualization_and_missing_tta():
    cfg = merged(DET, '--show-dir', 'vis')
    hook = cfg.default_hooks.visualization
    assert hook.draw is True and hook.test_out_dir == 'vis'
    # the COCO configs define no TTA, and mmdet has no default one
    with pytest.raises(ValueError, match="--tta: .*scope 'mmdet'.* needs tta_model.*neither"):
        merged(DET, '--tta')


def test_cfg_options_win():
    cfg = merged(PROBE, '--no-pin-memory', '--cfg-options', 'test_dataloader.pin_memory=True')
    assert cfg.test_dataloader.pin_memory is True


def test_visualization_without_the_hook_is_an_error():
    cfg = Config.fromfile(PROBE)
    del cfg.default_hooks['visualization']
    args = tool.parse_args([PROBE, 'ckpt.pth', '--show'])
    with pytest.raises(ValueError, match="no default_hooks.visualization.*'checkpoint'"):
        tool.merge_args(cfg, args)


@pytest.mark.parametrize('options, message', [
    (['--out-item', 'metrics'], '--out-item metrics: give the file with --out'),
    (['--out', 'preds.json'], "--out 'preds.json' with --out-item pred"),
    (['--out', 'm.txt', '--out-item', 'metrics'], "--out 'm.txt' with --out-item metrics"),
    (['--interval', '0'], '--interval must be >= 1, got 0'),
])
def test_bad_arguments(capsys, options, message):
    with pytest.raises(SystemExit):
        tool.parse_args([PROBE, 'ckpt.pth', *options])
    assert message in capsys.readouterr().err


def _out_error(capsys, out):
    with pytest.raises(SystemExit) as info:
        tool.parse_args([PROBE, 'ckpt.pth', '--out', str(out)])
    assert info.value.code == 2  # before the config, the checkpoint or the test are touched
    return capsys.readouterr().err


def test_an_out_path_that_cannot_be_written_fails_before_the_test(tmp_path, capsys,
                                                                 monkeypatch):
    """A folder, a file in the way and a folder without permission failed after the whole
    test, in the dump."""
    folder = tmp_path / 'preds.pkl'
    folder.mkdir()
    assert f"--out '{folder}' is a folder; give a file path in a folder you can write" in \
        _out_error(capsys, folder)
    blocker = tmp_path / 'file'
    blocker.write_text('')
    assert (f"--out '{blocker}/sub/preds.pkl' cannot be created: {blocker} on its way is a "
            'file, not a folder') in _out_error(capsys, blocker / 'sub' / 'preds.pkl')
    locked = tmp_path / 'locked'
    locked.mkdir()
    # the tests may run as root, whom permission bits do not stop: the folder reads as locked
    real_access = tool.os.access
    monkeypatch.setattr(tool.os, 'access',
                        lambda path, mode: str(path) != str(locked) and real_access(path, mode))
    assert (f"--out '{locked}/new/preds.pkl' cannot be created: no permission to write in "
            f'{locked}') in _out_error(capsys, locked / 'new' / 'preds.pkl')


def test_an_existing_out_file_is_named_in_a_warning(tmp_path, capsys):
    """It was replaced without a word (as mmengine's DumpResults does: still replaced)."""
    from mmengine.logging import MMLogger
    MMLogger.get_instance('out_warning_test')
    existing = tmp_path / 'preds.pkl'
    existing.write_bytes(b'old')
    args = tool.parse_args([PROBE, 'ckpt.pth', '--out', str(existing)])
    assert args.out == str(existing)
    assert f'WARNING - --out {existing} exists: the test replaces it' in capsys.readouterr().out
    missing_folders = tmp_path / 'new' / 'deeper' / 'preds.pkl'  # created when written
    assert tool.parse_args([PROBE, 'ckpt.pth', '--out', str(missing_folders)]).out == \
        str(missing_folders)
