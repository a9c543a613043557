"""TrainableOptimWrapperConstructor: mmengine's param groups, logged as a few summary lines
instead of mmengine's INFO line per parameter with a paramwise setting and warning per frozen
parameter (DINO's teacher: the bulk of a DINO training log)."""
import os.path as osp
import sys

import pytest
from mmengine.logging import MMLogger
from mmengine.optim import DefaultOptimWrapperConstructor

import dinomamba_mm  # noqa: F401
from dinomamba_mm.registry import OPTIM_WRAPPER_CONSTRUCTORS

sys.path.insert(0, osp.join(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))))
from test_models.test_selfsup.test_dino import DINOVIM, build  # noqa: E402

OPTIM = dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=5e-4, weight_decay=0.04))
PARAMWISE = dict(bias_decay_mult=0., flat_decay_mult=0.)


def _groups(optim_wrapper, model):
    names = {id(p): n for n, p in model.named_parameters()}
    return [(names[id(p)], {k: v for k, v in group.items() if k != 'params'})
            for group in optim_wrapper.optimizer.param_groups for p in group['params']]


def test_same_param_groups_as_mmengine_and_a_summary_instead_of_a_line_each(logged):
    model = build(DINOVIM)
    stock = DefaultOptimWrapperConstructor(OPTIM, PARAMWISE)(model)
    # what mmengine logs: a line per parameter without decay, a warning per frozen one
    assert sum(m.startswith('paramwise_options -- ') for m in logged) > 20
    assert sum('is skipped since its requires_grad=False' in m for m in logged) == \
        sum(not p.requires_grad for p in model.parameters())
    logged.clear()
    ours = OPTIM_WRAPPER_CONSTRUCTORS.build(
        dict(type='TrainableOptimWrapperConstructor', optim_wrapper_cfg=OPTIM,
             paramwise_cfg=PARAMWISE))(model)
    assert _groups(ours, model) == _groups(stock, model)
    assert not [m for m in logged if m.startswith('paramwise_options -- ')
                or m.endswith('is skipped since its requires_grad=False')]
    (summary, ) = [m for m in logged if m.startswith('TrainableOptimWrapperConstructor')]
    # the counts derived here from mmengine's rules: no decay on biases and 1-D parameters
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    no_decay = [(n, p) for n, p in trained if n.endswith('.bias') or p.ndim == 1]
    decayed = len(trained) - len(no_decay)
    frozen_student = [n for n, p in model.named_parameters()
                      if not p.requires_grad and not n.startswith('teacher.')]
    teacher = sum(1 for _ in model.teacher.parameters())
    assert summary.splitlines() == [
        f'TrainableOptimWrapperConstructor: AdamW: {len(trained)} parameter tensors '
        f'({sum(p.numel() for _, p in trained):,} values) in {len(trained)} groups, by setting:',
        f'  lr 0.0005: weight_decay 0.04 on {decayed} tensors '
        f'({sum(p.numel() for _, p in trained) - sum(p.numel() for _, p in no_decay):,} '
        f'values); 0 on {len(no_decay)} tensors ({sum(p.numel() for _, p in no_decay):,} '
        f'values, e.g. {no_decay[0][0]})',
        f'  not trained (requires_grad=False): {", ".join(frozen_student)}'
        f'{", " if frozen_student else ""}teacher.* ({teacher} tensors)']


def test_an_all_frozen_model_is_refused_as_by_mmengine():
    model = build(DINOVIM)
    model.requires_grad_(False)
    with pytest.raises(ValueError, match='empty parameter list'):
        OPTIM_WRAPPER_CONSTRUCTORS.build(
            dict(type='TrainableOptimWrapperConstructor', optim_wrapper_cfg=OPTIM,
                 paramwise_cfg=PARAMWISE))(model)


def test_other_messages_pass_and_the_filter_is_removed(logged):
    """Only the per-parameter lines are dropped, and only while the groups are built."""
    model = build(DINOVIM)
    OPTIM_WRAPPER_CONSTRUCTORS.build(
        dict(type='TrainableOptimWrapperConstructor', optim_wrapper_cfg=OPTIM,
             paramwise_cfg=dict(PARAMWISE, bypass_duplicate=True)))(model)
    logger = MMLogger.get_current_instance()
    assert logger.filters == []
    logger.info('paramwise_options -- after the constructor')
    assert logged[-1] == 'paramwise_options -- after the constructor'
