"""tools/misc/get_flops.py counts against hand-derived FLOPs (1 multiply-add = 2 FLOPs)."""
import importlib.util
import os.path as osp

import torch

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
spec = importlib.util.spec_from_file_location(
    'get_flops', osp.join(ROOT, 'tools', 'misc', 'get_flops.py'))
get_flops = importlib.util.module_from_spec(spec)
spec.loader.exec_module(get_flops)


def test_patch_embedding_and_linear_flops_match_hand_count():
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, kernel_size=16, stride=16),  # 32x32 -> 2x2 patches
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 2 * 2, 5))
    result = get_flops.count(model, (32, 32))
    conv = 2 * (2 * 2) * 8 * (3 * 16 * 16)   # outputs x (C_in * k * k) MACs
    linear = 2 * 32 * 5
    assert result['flops'] == conv + linear
    assert result['params'] == 8 * 3 * 16 * 16 + 8 + 32 * 5 + 5
