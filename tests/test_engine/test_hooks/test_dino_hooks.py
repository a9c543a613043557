"""DINO schedule hooks against DINO's numpy schedules, with a stand-in runner."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from mmengine.optim import OptimWrapper
from mmengine.registry import MODEL_WRAPPERS
from mmengine.runner import IterBasedTrainLoop
from torch import nn

import dinomamba_mm  # noqa: F401
from dinomamba_mm.engine.hooks import (DINOTeacherEMAHook, DINOTeacherTempHook,
                                       FreezeLastLayerHook, PerParameterGradClipHook)
from dinomamba_mm.engine.hooks.per_parameter_grad_clip_hook import clip_each_gradient_
from dinomamba_mm.registry import HOOKS


def dino_cosine(base, final, epochs, niter_per_ep):
    """DINO's utils.cosine_scheduler without warm-up, values per iteration."""
    iters = np.arange(epochs * niter_per_ep)
    return final + 0.5 * (base - final) * (1 + np.cos(np.pi * iters / len(iters)))


@MODEL_WRAPPERS.register_module()
class _StandInDDP(nn.Module):
    """Stands for MMDistributedDataParallel: the real model is ``.module``."""

    def __init__(self, module):
        super().__init__()
        self.module = module


class _EMAModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.momenta = []

    def update_teacher(self, momentum):
        self.momenta.append(momentum)


def test_hooks_registered():
    for name in ('DINOTeacherEMAHook', 'DINOTeacherTempHook', 'FreezeLastLayerHook'):
        assert HOOKS.get(name) is not None


@pytest.mark.parametrize('wrap', [False, True], ids=['plain', 'ddp'])
def test_teacher_momentum_schedule(wrap):
    epochs, niter = 3, 4
    expected = dino_cosine(0.996, 1.0, epochs, niter)
    model = _EMAModel()
    optim = SimpleNamespace(should_update=lambda: True)
    runner = SimpleNamespace(model=_StandInDDP(model) if wrap else model,
                             max_iters=epochs * niter, optim_wrapper=optim)
    hook = DINOTeacherEMAHook(base_momentum=0.996, final_momentum=1.0)
    for it in range(epochs * niter):
        runner.iter = it
        hook.after_train_iter(runner, batch_idx=it % niter)
    np.testing.assert_allclose(model.momenta, expected, rtol=0, atol=1e-12)
    assert model.momenta[0] == 0.996 and model.momenta[-1] < 1.0
    # gradient accumulation: no optimizer step, no teacher update
    runner.optim_wrapper = SimpleNamespace(should_update=lambda: False)
    hook.after_train_iter(runner, batch_idx=0)
    assert len(model.momenta) == epochs * niter
    with pytest.raises(ValueError, match='base_momentum'):
        DINOTeacherEMAHook(base_momentum=1.2)


@pytest.mark.parametrize('warmup,start,end', [(30, 0.04, 0.07), (0, 0.04, 0.04), (1, 0.03, 0.07)])
def test_teacher_temperature_warmup(warmup, start, end):
    epochs = 40
    expected = np.concatenate((np.linspace(start, end, warmup), np.ones(epochs - warmup) * end))
    model = nn.Module()
    model.head = nn.Module()
    model.head.register_buffer('teacher_temp', torch.tensor(1.0))
    hook = DINOTeacherTempHook(warmup_teacher_temp=start, teacher_temp=end,
                               warmup_epochs=warmup)
    runner = SimpleNamespace(model=_StandInDDP(model))
    got = []
    for epoch in range(epochs):
        runner.epoch = epoch
        hook.before_train_epoch(runner)
        got.append(model.head.teacher_temp.item())
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    with pytest.raises(ValueError, match='warmup_epochs'):
        DINOTeacherTempHook(warmup_epochs=-1)


def _iter_based_loop():
    return IterBasedTrainLoop.__new__(IterBasedTrainLoop)


def test_epoch_schedules_refuse_iter_based_loops():
    runner = SimpleNamespace(train_loop=_iter_based_loop(), model=_HeadModel())
    with pytest.raises(ValueError, match='warmup_epochs=3'):
        DINOTeacherTempHook(warmup_epochs=3).before_train(runner)
    DINOTeacherTempHook(warmup_epochs=0).before_train(runner)
    with pytest.raises(ValueError, match='freeze_epochs=1'):
        FreezeLastLayerHook(freeze_epochs=1).before_train(runner)


class _HeadModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.neck = nn.Module()
        self.neck.last_layer = nn.Linear(4, 3)

    def forward(self, x):
        return self.neck.last_layer(torch.tanh(self.body(x))).pow(2).sum()


def _step(model, optim):
    loss = model(torch.randn(5, 4))
    optim.update_params(loss)


@pytest.mark.parametrize('wrap', [False, True], ids=['plain', 'ddp'])
def test_freeze_last_layer(wrap):
    torch.manual_seed(0)
    model = _HeadModel()
    optim = OptimWrapper(torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.5),
                         clip_grad=dict(max_norm=3.0))
    runner = SimpleNamespace(model=_StandInDDP(model) if wrap else model, optim_wrapper=optim,
                             epoch=0, train_loop=None)
    hook = FreezeLastLayerHook(freeze_epochs=2)
    hook.before_train(runner)

    def snapshot():
        return ([p.detach().clone() for p in model.neck.last_layer.parameters()],
                [p.detach().clone() for p in model.body.parameters()])

    for epoch, frozen in ((0, True), (1, True), (2, False)):
        runner.epoch = epoch
        (last0, body0), _ = snapshot(), _step(model, optim)
        last1, body1 = snapshot()
        assert all(not torch.equal(a, b) for a, b in zip(body0, body1))
        # frozen: not even weight decay or moment updates touch the layer
        assert all(torch.equal(a, b) == frozen for a, b in zip(last0, last1)), epoch
        assert all((p in optim.optimizer.state) != frozen
                   for p in model.neck.last_layer.parameters()), epoch

    hook.after_train(runner)
    runner.epoch = 0
    last0, _ = snapshot()
    _step(model, optim)
    assert not torch.equal(last0[0], model.neck.last_layer.weight)  # hook removed

    with pytest.raises(ValueError, match="'neck.nope'"):
        FreezeLastLayerHook(module_name='neck.nope').before_train(runner)


@pytest.mark.parametrize('build, error, message', [
    (lambda: DINOTeacherTempHook(teacher_temp='a'), TypeError,
     "teacher_temp must be a number in (0, inf), got 'a'"),
    (lambda: DINOTeacherTempHook(warmup_teacher_temp=0), ValueError,
     'warmup_teacher_temp must be a number in (0, inf), got 0'),
    (lambda: DINOTeacherTempHook(teacher_temp=float('nan')), TypeError, 'teacher_temp'),
    (lambda: DINOTeacherEMAHook(final_momentum=1.5), ValueError,
     'final_momentum must be a number in [0, 1], got 1.5'),
    (lambda: DINOTeacherEMAHook(base_momentum=True), TypeError, 'base_momentum'),
    (lambda: FreezeLastLayerHook(module_name=3), TypeError, 'module_name must be the dotted'),
])
def test_hook_arguments_are_checked(build, error, message):
    with pytest.raises(error) as info:
        build()
    assert message in str(info.value)


def test_clip_each_gradient_against_the_formula():
    """DINO's clip_gradients, written out in float64: g * min(1, c / (||g|| + 1e-6))."""
    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=shape) * scale
              for shape, scale in (((3, 4), 10.), ((5,), 0.01), ((2, 2, 2), 1.))]
    grads = [torch.tensor(a, dtype=torch.float64) for a in arrays]
    clip_each_gradient_(grads, max_norm=3.0)
    for got, a in zip(grads, arrays):
        expected = a * min(1.0, 3.0 / (np.sqrt((a ** 2).sum()) + 1e-6))
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)
    assert torch.linalg.norm(grads[0]).item() == pytest.approx(3.0, rel=1e-6)


def test_per_parameter_clip_hook_clips_inside_the_optimizer_step():
    big, small = nn.Parameter(torch.zeros(4)), nn.Parameter(torch.zeros(3))
    optim_wrapper = OptimWrapper(torch.optim.SGD([big, small], lr=1.0))
    runner = SimpleNamespace(optim_wrapper=optim_wrapper)
    hook = PerParameterGradClipHook(max_norm=1.0)
    hook.before_train(runner)
    big.grad = torch.tensor([3., 4., 0., 0.])  # norm 5 -> scaled to norm 1
    small.grad = torch.tensor([0.1, 0.2, 0.2])  # norm 0.3 -> unchanged (a global clip would
    optim_wrapper.step()                        # have scaled it by 1 / 5.01)
    torch.testing.assert_close(big.detach(), -torch.tensor([3., 4., 0., 0.]) / (5 + 1e-6))
    torch.testing.assert_close(small.detach(), -torch.tensor([0.1, 0.2, 0.2]))
    hook.after_train(runner)
    big.grad = torch.tensor([3., 4., 0., 0.])
    optim_wrapper.step()  # hook removed: a plain SGD step
    torch.testing.assert_close(big.detach(), -torch.tensor([3., 4., 0., 0.]) * (1 + 1 / 5.000001))


def test_per_parameter_clip_hook_refuses_a_second_clip():
    optim_wrapper = OptimWrapper(torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0),
                                 clip_grad=dict(max_norm=3.0))
    with pytest.raises(ValueError, match="remove optim_wrapper.clip_grad=.*'max_norm': 3.0"):
        PerParameterGradClipHook().before_train(SimpleNamespace(optim_wrapper=optim_wrapper))
    with pytest.raises(ValueError, match='max_norm must be a number in \\(0, inf\\), got 0'):
        PerParameterGradClipHook(max_norm=0)


def test_cosine_ema_is_not_dinos_teacher_update():
    """mmpretrain 1.2.0's CosineEMA has DINO's formula (its momentum is 1 - ours) but not its
    update: the first ``update_parameters`` copies the student (mmengine's BaseAveragedModel at
    ``steps == 0``) where DINO averages with m = 0.996. Should this fail, CosineEMA can take
    over from DINOTeacherEMAHook."""
    from mmengine.logging import MessageHub
    from mmpretrain.models.utils import CosineEMA

    max_iters = 12
    MessageHub.get_current_instance().update_info('max_iters', max_iters)
    hook = DINOTeacherEMAHook(base_momentum=0.996, final_momentum=1.0)
    expected = dino_cosine(0.996, 1.0, 1, max_iters)
    teacher = nn.Linear(1, 1, bias=False)
    ema = CosineEMA(teacher, momentum=1 - 0.996, end_momentum=0.0)
    for it in range(max_iters):
        average = torch.ones(1, dtype=torch.float64)
        ema.avg_func(average, torch.zeros(1, dtype=torch.float64), it)
        assert average.item() == pytest.approx(expected[it], abs=1e-15)
        assert hook.momentum(it, max_iters) == pytest.approx(expected[it], abs=1e-15)
    student = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        ema.module.weight.fill_(1.0)
        student.weight.fill_(0.0)
    ema.update_parameters(student)
    dino_first_update = 0.996 * 1.0 + (1 - 0.996) * 0.0
    assert ema.module.weight.item() == 0.0 != dino_first_update


def test_the_foreach_ops_behave_as_checked():
    """The torch._foreach_* ops of clip_each_gradient_ and finite_checks.non_finite_tensors
    (torch's documented beta "foreach" API, checked with torch 2.14.1) against their per-tensor
    public counterparts; a change of their behaviour fails here."""
    g = torch.Generator().manual_seed(0)
    tensors = [torch.randn(3, 4, generator=g), torch.randn(5, generator=g) * 100,
               torch.tensor([1.0, float('inf')]), torch.tensor([float('nan'), 2.0]),
               torch.randn(2, 2, generator=g).bfloat16()]
    for ord_ in (2.0, float('inf')):
        norms = torch._foreach_norm(tensors, ord_)
        assert len(norms) == len(tensors)
        for norm, tensor in zip(norms, tensors):
            assert norm.dim() == 0 and norm.dtype == tensor.dtype
            torch.testing.assert_close(norm, torch.linalg.vector_norm(tensor, ord_),
                                       equal_nan=True)
    values = [torch.tensor([1.0, 2.0]), torch.tensor([4.0])]
    torch._foreach_add_(values, 1.0)
    torch._foreach_reciprocal_(values)
    torch._foreach_mul_(values, 6.0)
    torch._foreach_clamp_max_(values, 2.5)
    assert [v.tolist() for v in values] == [[2.5, 2.0], [1.2000000476837158]]
    grads = [torch.ones(2, 3), torch.ones(4)]
    torch._foreach_mul_(grads, [torch.tensor(0.5), torch.tensor(2.0)])  # 0-d scales broadcast
    assert torch.equal(grads[0], torch.full((2, 3), 0.5)) and torch.equal(grads[1],
                                                                          torch.full((4, ), 2.))
