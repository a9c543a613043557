"""tools/train.py --auto-scale-lr with a config that cannot be scaled: an error naming the flag
and what to add to the config (mmengine's Runner failed on None with an AttributeError, without
base_batch_size on an assert after building everything, on 0 with a ZeroDivisionError, and
scaled the learning rate by a negative ratio for -256)."""
import os.path as osp
import sys

import pytest
from mmengine.config import Config

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(ROOT, 'tests'))
from helpers.tools import load_tool  # noqa: E402

PROBE = osp.join(ROOT, 'configs/dino/benchmarks',
                 'dinovim-tiny-p16_dino-ours_8xb128-linear-coslr-100e_in1k.py')
FIX = ('add auto_scale_lr = dict(base_batch_size=N) to the config, N being the total batch size '
       "(batch size per process x processes) its learning rate is meant for, as mmpretrain's "
       'configs do (e.g. auto_scale_lr = dict(base_batch_size=256))')


def merged(tmp_path, config_text):
    path = tmp_path / 'config.py'
    path.write_text(f"_base_ = ['{PROBE}']\n{config_text}")
    tool = load_tool('tools/train.py')
    args = tool.parse_args([str(path), '--auto-scale-lr', '--work-dir', str(tmp_path / 'w')])
    return tool.merge_args(Config.fromfile(str(path)), args), str(path)


@pytest.mark.parametrize('config_text, error, message', [
    ('auto_scale_lr = None\n', ValueError, '--auto-scale-lr: config {path} has no auto_scale_lr; '
     + FIX),
    ('auto_scale_lr = 256\n', ValueError, '--auto-scale-lr: config {path} has auto_scale_lr=256, '
     'not a dict; ' + FIX),
    ('auto_scale_lr = dict(_delete_=True, enable=False)\n', ValueError,
     "--auto-scale-lr: config {path} has auto_scale_lr={'enable': False} without "
     'base_batch_size; ' + FIX),
    ('auto_scale_lr = dict(base_batch_size=0)\n', ValueError,
     'auto_scale_lr.base_batch_size must be an int >= 1, got 0'),
    ('auto_scale_lr = dict(base_batch_size=-256)\n', ValueError,
     'auto_scale_lr.base_batch_size must be an int >= 1, got -256'),
    ("auto_scale_lr = dict(base_batch_size='256')\n", TypeError,
     "auto_scale_lr.base_batch_size must be an int >= 1, got '256'"),
])
def test_an_unscalable_config_names_the_flag_and_the_fix(tmp_path, config_text, error, message):
    path = str(tmp_path / 'config.py')
    with pytest.raises(error) as info:
        merged(tmp_path, config_text)
    assert str(info.value) == message.replace('{path}', path)


def test_a_config_without_the_field_names_the_flag_and_the_fix(tmp_path):
    path = tmp_path / 'config.py'
    path.write_text("model = dict(type='ImageClassifier')\n")
    tool = load_tool('tools/train.py')
    args = tool.parse_args([str(path), '--auto-scale-lr'])
    with pytest.raises(ValueError, match=f'^--auto-scale-lr: config {path} has no auto_scale_lr; '
                                         'add auto_scale_lr = dict'):
        tool.merge_args(Config.fromfile(str(path)), args)


def test_a_scalable_config_is_enabled(tmp_path):
    cfg, _ = merged(tmp_path, '')
    assert cfg.auto_scale_lr == dict(base_batch_size=1024, enable=True)
