"""NonFiniteStepHook with a real optimizer and a stand-in runner.

Oracle: a skipped step leaves the parameters and the optimizer state exactly as a copy taken
before it; the counts of bad iterations are written out by hand.
"""
import copy
from types import SimpleNamespace

import pytest
import torch
from mmengine.logging import MessageHub
from mmengine.optim import OptimWrapper
from torch import nn

import dinomamba_mm  # noqa: F401
from dinomamba_mm.engine.safeguards import NonFiniteStepHook
from dinomamba_mm.finite_checks import non_finite_tensors


def make_runner(lr=0.1):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    return SimpleNamespace(model=model, optim_wrapper=OptimWrapper(optimizer), iter=0,
                           max_iters=10, message_hub=MessageHub(f'test_hub_{id(model)}'))


def train_iter(runner, hook, inputs):
    loss = runner.model(inputs).sum()
    runner.optim_wrapper.update_params(loss)
    hook.after_train_iter(runner, batch_idx=runner.iter, outputs=dict(loss=loss.detach()))
    runner.iter += 1


def test_non_finite_tensors_finds_nan_and_inf_without_overflow():
    tensors = [torch.tensor([1., float('nan')]), torch.full((3, ), 3e38),
               torch.tensor([-float('inf')]), torch.zeros(0), torch.ones(2, dtype=torch.half)]
    assert non_finite_tensors(tensors) == [0, 2]
    assert non_finite_tensors([]) == []


def test_a_nan_batch_is_skipped_and_leaves_weights_and_optimizer_state_untouched():
    runner = make_runner()
    hook = NonFiniteStepHook(max_consecutive_skips=2)
    hook.before_train(runner)
    train_iter(runner, hook, torch.ones(2, 3))  # a good step: AdamW state exists
    weights = copy.deepcopy(runner.model.state_dict())
    state = copy.deepcopy(runner.optim_wrapper.optimizer.state_dict())

    bad = torch.ones(2, 3)
    bad[1, 2] = float('nan')
    train_iter(runner, hook, bad)
    assert hook.consecutive == 1
    for key, value in runner.model.state_dict().items():
        assert torch.equal(value, weights[key]), key
    after = runner.optim_wrapper.optimizer.state_dict()['state']
    for index, entry in state['state'].items():
        for name, value in entry.items():
            assert torch.equal(after[index][name], value), (index, name)

    train_iter(runner, hook, torch.ones(2, 3))
    assert hook.consecutive == 0  # a good iteration resets the count
    assert not any(torch.equal(v, weights[k]) for k, v in runner.model.state_dict().items())


def test_stops_after_max_consecutive_skips_naming_the_iteration():
    runner = make_runner()
    hook = NonFiniteStepHook(max_consecutive_skips=2)
    hook.before_train(runner)
    bad = torch.full((2, 3), float('nan'))
    # NaN inputs: the gradients of both weights are NaN, those of both biases finite
    train_iter(runner, hook, bad)  # iteration 1
    train_iter(runner, hook, bad)  # iteration 2
    with pytest.raises(FloatingPointError) as info:
        train_iter(runner, hook, bad)
    message = str(info.value)
    assert message.startswith(
        'iteration 3 of 10: loss nan; 2 of 4 gradients not finite (first: 0.weight)')
    assert '3 bad iteration(s) in a row (max_consecutive_skips=2): training stopped' in message


def test_a_resumed_run_continues_the_count_of_bad_iterations():
    """The count travels in the message hub, which mmengine checkpoints and restores on resume
    (and not on load_from): a run killed in a streak of bad batches stops where the
    uninterrupted one would have."""
    runner = make_runner()
    hook = NonFiniteStepHook(max_consecutive_skips=2)
    hook.before_train(runner)
    bad = torch.full((2, 3), float('nan'))
    train_iter(runner, hook, bad)  # iteration 1
    train_iter(runner, hook, bad)  # iteration 2, then killed after its checkpoint
    hub_state = runner.message_hub.state_dict()

    resumed = make_runner()
    resumed.iter = runner.iter
    resumed.message_hub.load_state_dict(hub_state)
    hook = NonFiniteStepHook(max_consecutive_skips=2)
    hook.before_train(resumed)
    with pytest.raises(FloatingPointError, match='3 bad iteration'):
        train_iter(resumed, hook, bad)  # iteration 3


def test_zero_skips_stops_at_the_first_bad_iteration():
    runner = make_runner()
    hook = NonFiniteStepHook(max_consecutive_skips=0)
    hook.before_train(runner)
    train_iter(runner, hook, torch.ones(2, 3))
    with pytest.raises(FloatingPointError, match='^iteration 2 of 10: loss nan'):
        train_iter(runner, hook, torch.full((2, 3), float('inf')))


def test_weights_made_non_finite_by_a_step_stop_at_once():
    """A diverging learning rate: finite gradients, but the update overflows float32."""
    runner = make_runner()
    runner.optim_wrapper = OptimWrapper(torch.optim.SGD(runner.model.parameters(), lr=1e38))
    hook = NonFiniteStepHook()
    hook.before_train(runner)
    with pytest.raises(FloatingPointError) as info:
        train_iter(runner, hook, torch.full((2, 3), 100.))
    assert str(info.value).startswith('iteration 1 of 10: the optimizer step made ')
    assert '0.weight' in str(info.value) and 'learning rate' in str(info.value)


def test_hooks_are_removed_after_training():
    runner = make_runner()
    hook = NonFiniteStepHook()
    hook.before_train(runner)
    hook.after_train(runner)
    weights = copy.deepcopy(runner.model.state_dict())
    loss = runner.model(torch.full((2, 3), float('nan'))).sum()
    runner.optim_wrapper.update_params(loss)  # no hook: the NaN step goes through
    assert not torch.isfinite(runner.model[0].weight).all()
    assert not torch.equal(runner.model[0].weight, weights['0.weight'])


@pytest.mark.parametrize('value, error', [(-1, ValueError), (1.5, TypeError)])
def test_max_consecutive_skips_is_checked(value, error):
    with pytest.raises(error, match='max_consecutive_skips must be an int >= 0'):
        NonFiniteStepHook(max_consecutive_skips=value)


def test_a_skipped_step_leaves_the_logged_loss_finite_and_is_counted():
    """After one skipped step, the loss mmengine logs (the mean over the logging window of
    what RuntimeInfoHook records) read nan for the rest of the window."""
    from mmengine.hooks import RuntimeInfoHook
    from mmengine.registry import HOOKS
    from mmengine.runner import get_priority

    runner = make_runner()
    hooks = sorted([NonFiniteStepHook(), HOOKS.build(dict(type='RuntimeInfoHook'))],
                   key=lambda hook: get_priority(hook.priority))
    assert isinstance(hooks[0], RuntimeInfoHook)  # it records the outputs; ours then amends
    hooks[1].before_train(runner)
    nan = torch.full((2, 3), float('nan'))
    losses = []
    for inputs in (nan, torch.ones(2, 3), nan, torch.ones(2, 3)):
        loss = runner.model(inputs).sum()
        runner.optim_wrapper.update_params(loss)
        for hook in hooks:
            hook.after_train_iter(runner, batch_idx=runner.iter,
                                  outputs=dict(loss=loss.detach()))
        losses.append(loss.item())
        runner.iter += 1
        if runner.iter == 1:  # a first step skipped: no loss logged yet
            assert 'train/loss' not in runner.message_hub.log_scalars
    logged = runner.message_hub.get_scalar('train/loss')
    assert logged.mean(10) == pytest.approx((losses[1] + losses[3]) / 2)
    assert runner.message_hub.get_scalar('train/skipped_steps').current() == 2
