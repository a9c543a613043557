"""AMP configs on a machine without an accelerator: tools/train.py and tools/test.py fall back
to float32 with a warning (``--no-amp-fallback`` keeps AMP, which mmengine then refuses)."""
import logging
import os.path as osp
import sys

import pytest
import torch
from mmengine.config import Config
from mmengine.optim import OptimWrapper, build_optim_wrapper

import dinomamba_mm  # noqa: F401
from dinomamba_mm.engine.safeguards import amp_fallback

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
sys.path.insert(0, osp.join(ROOT, 'tests'))
from helpers.tools import load_tool  # noqa: E402

AMP = dict(type='AmpOptimWrapper', dtype='bfloat16', loss_scale='dynamic',
           optimizer=dict(type='AdamW', lr=5e-4, weight_decay=0.04),
           paramwise_cfg=dict(bias_decay_mult=0.), clip_grad=dict(max_norm=3.0))


def _config(**extra) -> Config:
    return Config(dict(optim_wrapper=dict(AMP), test_cfg=dict(type='TestLoop', fp16=True),
                       **extra))


@pytest.fixture
def no_accelerator(monkeypatch):
    monkeypatch.setattr(amp_fallback, 'has_amp_device', lambda: False)


@pytest.fixture
def log_lines(monkeypatch):
    lines = []
    monkeypatch.setattr(amp_fallback, 'print_log',
                        lambda msg, logger, level: lines.append((msg, logger, level)))
    return lines


def test_mmengine_refuses_amp_exactly_where_the_fallback_applies():
    """Why the fallback exists, and that its test is mmengine's (fails once mmengine builds
    AmpOptimWrapper on a bare CPU)."""
    if amp_fallback.has_amp_device():
        build_optim_wrapper(torch.nn.Linear(2, 2), dict(AMP))
        return
    with pytest.raises(AssertionError, match='only available'):
        build_optim_wrapper(torch.nn.Linear(2, 2), dict(AMP))


def test_amp_falls_back_to_the_same_recipe_in_float32(no_accelerator, log_lines):
    cfg = _config()
    amp_fallback.fall_back_to_fp32_without_accelerator(cfg)
    expected = {k: v for k, v in AMP.items() if k not in ('dtype', 'loss_scale')}
    assert cfg.optim_wrapper.to_dict() == dict(expected, type='OptimWrapper')
    assert cfg.test_cfg.to_dict() == dict(type='TestLoop', fp16=False)
    assert isinstance(build_optim_wrapper(torch.nn.Linear(2, 2), cfg.optim_wrapper),
                      OptimWrapper)
    assert len(log_lines) == 2 and all(
        'no accelerator' in msg and '--no-amp-fallback' in msg and level == logging.WARNING
        for msg, _, level in log_lines), log_lines


def test_amp_is_kept_where_there_is_an_accelerator(monkeypatch, log_lines):
    monkeypatch.setattr(amp_fallback, 'has_amp_device', lambda: True)
    cfg = _config()
    amp_fallback.fall_back_to_fp32_without_accelerator(cfg)
    assert cfg.optim_wrapper.type == 'AmpOptimWrapper' and cfg.test_cfg.fp16 is True
    assert not log_lines


@pytest.mark.parametrize('tool,argv', [
    ('tools/train.py', ['cfg.py']),
    ('tools/test.py', ['cfg.py', 'ckpt.pth']),
])
def test_tools_fall_back_unless_told_not_to(tool, argv, no_accelerator, log_lines):
    module = load_tool(tool)
    cfg = module.merge_args(_config(), module.parse_args(argv))
    assert cfg.optim_wrapper.type == 'OptimWrapper' and cfg.test_cfg.fp16 is False
    cfg = module.merge_args(_config(), module.parse_args(argv + ['--no-amp-fallback']))
    assert cfg.optim_wrapper.type == 'AmpOptimWrapper' and cfg.test_cfg.fp16 is True
