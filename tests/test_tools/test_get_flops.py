"""tools/misc/get_flops.py counts against hand-derived FLOPs (mmpretrain's: 1 multiply-add = 1)."""
import os.path as osp
import sys

import torch

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(ROOT, 'tests'))
from helpers.tools import load_tool  # noqa: E402

get_flops = load_tool('tools/misc/get_flops.py')


def test_patch_embedding_and_linear_flops_match_hand_count():
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, kernel_size=16, stride=16),  # 32x32 -> 2x2 patches
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 2 * 2, 5))
    result = get_flops.count(model, (32, 32))
    conv = (2 * 2) * 8 * (3 * 16 * 16)   # outputs x (C_in * k * k) multiply-adds
    linear = 32 * 5
    assert result['flops'] == conv + linear
    assert result['params'] == 8 * 3 * 16 * 16 + 8 + 32 * 5 + 5


def test_a_whole_probe_is_counted_without_its_teacher_file(capsys):
    """--part model of a linear probe: FLOPs do not depend on the weights, so its frozen
    teacher (a file that may not be here) is not loaded and the count runs."""
    config = osp.join(ROOT, 'configs', 'demo', 'linear-probe_dinovim-demo_synthetic.py')
    whole = get_flops.main([config, '--part', 'model', '--shape', '32'])
    backbone = get_flops.main([config, '--part', 'backbone', '--shape', '32'])
    assert whole['flops'] > backbone['flops'] and whole['params'] > backbone['params']


def test_a_shape_of_zero_is_refused(capsys):
    """--shape 0 failed inside the patch embedding's convolution."""
    import pytest
    config = osp.join(ROOT, 'configs', 'demo', 'dino_dinovim-demo_synthetic.py')
    with pytest.raises(SystemExit):
        get_flops.main([config, '--shape', '0'])
    assert '--shape must be an int >= 1, got 0' in capsys.readouterr().err
