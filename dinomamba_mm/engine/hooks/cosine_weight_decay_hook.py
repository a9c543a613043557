"""Per-iteration cosine weight-decay schedule (DINO: 0.04 -> 0.4)."""
from typing import Optional

from mmengine.hooks import Hook

from dinomamba_mm.argument_checks import check_number
from dinomamba_mm.registry import HOOKS
from .cosine_schedule import cosine_schedule


@HOOKS.register_module()
class CosineWeightDecayHook(Hook):
    """Anneal the weight decay from the optimizer's ``weight_decay`` to ``final_weight_decay``.

    Before iteration ``it`` of ``max_iters``, every param group gets::

        weight_decay = initial_weight_decay / base * cosine(base, final_weight_decay, it, max_iters)

    where ``base`` is the optimizer's configured ``weight_decay`` and ``initial_weight_decay``
    the group's value when training started (recorded in the group, so it is saved with the
    optimizer state and a resumed run continues exactly). Groups built without decay
    (``bias_decay_mult=0`` / ``flat_decay_mult=0`` in ``paramwise_cfg``) stay at 0; decayed
    groups follow ``final + (base - final) * (1 + cos(pi * it / T)) / 2``.

    Args:
        final_weight_decay (float): Weight decay at the end of training. Defaults to 0.4.
    """

    priority = 'NORMAL'

    def __init__(self, final_weight_decay: float = 0.4) -> None:
        check_number('final_weight_decay', final_weight_decay, 0)
        self.final_weight_decay = final_weight_decay

    def before_train(self, runner) -> None:
        base = runner.optim_wrapper.optimizer.defaults.get('weight_decay', 0.0)
        if not base > 0:
            raise ValueError('CosineWeightDecayHook needs an optimizer with weight_decay > 0, '
                             f'got weight_decay={base}')
        for group in runner.optim_wrapper.param_groups:
            group.setdefault('initial_weight_decay', group['weight_decay'])

    def before_train_iter(self, runner, batch_idx: int, data_batch: Optional[dict] = None) -> None:
        base = runner.optim_wrapper.optimizer.defaults['weight_decay']
        value = cosine_schedule(base, self.final_weight_decay, runner.iter, runner.max_iters)
        for group in runner.optim_wrapper.param_groups:
            group['weight_decay'] = group['initial_weight_decay'] / base * value
