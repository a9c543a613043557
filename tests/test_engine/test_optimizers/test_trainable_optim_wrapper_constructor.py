"""TrainableOptimWrapperConstructor: mmengine's param groups, without one warning per frozen
parameter of DINO's teacher (the bulk of a DINO training log)."""
import os.path as osp
import sys

import pytest
from mmengine.optim import DefaultOptimWrapperConstructor

import dinomamba_mm  # noqa: F401
from dinomamba_mm.engine.optimizers import trainable_optim_wrapper_constructor as module
from dinomamba_mm.registry import OPTIM_WRAPPER_CONSTRUCTORS

sys.path.insert(0, osp.join(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))))
from test_models.test_selfsup.test_dino import DINOVIM, build  # noqa: E402

OPTIM = dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=5e-4, weight_decay=0.04))
PARAMWISE = dict(bias_decay_mult=0., flat_decay_mult=0.)


def _groups(optim_wrapper, model):
    names = {id(p): n for n, p in model.named_parameters()}
    return [(names[id(p)], {k: v for k, v in group.items() if k != 'params'})
            for group in optim_wrapper.optimizer.param_groups for p in group['params']]


def test_same_param_groups_as_mmengine_without_the_teacher_warnings(monkeypatch):
    model = build(DINOVIM)
    logged = []
    monkeypatch.setattr('mmengine.optim.optimizer.default_constructor.print_log',
                        lambda msg, **kwargs: logged.append(msg))
    stock = DefaultOptimWrapperConstructor(OPTIM, PARAMWISE)(model)
    stock_warnings = [m for m in logged if 'is skipped since its requires_grad=False' in m]
    assert sum(m.startswith('teacher.') for m in stock_warnings) == \
        sum(1 for _ in model.teacher.parameters())
    logged.clear()
    ours = OPTIM_WRAPPER_CONSTRUCTORS.build(
        dict(type='TrainableOptimWrapperConstructor', optim_wrapper_cfg=OPTIM,
             paramwise_cfg=PARAMWISE))(model)
    assert _groups(ours, model) == _groups(stock, model)
    assert not any(m.startswith('teacher.') for m in logged)
    # a frozen parameter of a trained module is still reported, as by mmengine
    assert [m for m in logged if 'requires_grad' in m] == [
        m for m in stock_warnings if not m.startswith('teacher.')]
    assert module.TrainableOptimWrapperConstructor.__mro__[1] is DefaultOptimWrapperConstructor


def test_an_all_frozen_model_is_refused_as_by_mmengine():
    model = build(DINOVIM)
    model.requires_grad_(False)
    with pytest.raises(ValueError, match='empty parameter list'):
        OPTIM_WRAPPER_CONSTRUCTORS.build(
            dict(type='TrainableOptimWrapperConstructor', optim_wrapper_cfg=OPTIM,
                 paramwise_cfg=PARAMWISE))(model)
