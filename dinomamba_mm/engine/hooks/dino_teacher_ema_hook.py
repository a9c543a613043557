"""Teacher EMA update of DINO with DINO's cosine momentum schedule."""
import math
from typing import Optional

from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper

from dinomamba_mm.argument_checks import check_number
from dinomamba_mm.engine.hook_options import checked_options
from dinomamba_mm.registry import HOOKS


@HOOKS.register_module()
@checked_options
class DINOTeacherEMAHook(Hook):
    """After every optimizer step: ``teacher <- m * teacher + (1 - m) * student``.

    The momentum follows ``m(it) = final + (base - final) * (1 + cos(pi * it / max_iters)) / 2``
    for iteration ``it`` (0-based, the one just trained), as in DINO. It is a pure function
    of the iteration, so a resumed run continues exactly (the value also lands in the model's
    ``momentum`` buffer). Not mmpretrain's ``CosineEMA``: its formula is this one, but its
    first update copies the student and it counts its own updates
    (``test_cosine_ema_is_not_dinos_teacher_update``). Works with plain and DDP-wrapped models
    (it unwraps ``.module``); the model must provide ``update_teacher(momentum)`` (:class:`dinomamba_mm.DINO`). A
    ``FloatingPointError`` of ``update_teacher`` (a non-finite student) is raised again with
    the iteration (1-based) in front.

    Args:
        base_momentum (float): Momentum at iteration 0. Defaults to 0.996.
        final_momentum (float): Momentum at the end of training. Defaults to 1.0.
    """

    priority = 'NORMAL'  # before CheckpointHook (VERY_LOW) so checkpoints hold the updated teacher

    def __init__(self, base_momentum: float = 0.996, final_momentum: float = 1.0) -> None:
        check_number('base_momentum', base_momentum, 0, 1)
        check_number('final_momentum', final_momentum, 0, 1)
        self.base_momentum = base_momentum
        self.final_momentum = final_momentum

    def momentum(self, it: int, max_iters: int) -> float:
        """Teacher momentum for iteration ``it`` of ``max_iters``."""
        cosine = (1.0 + math.cos(math.pi * it / max_iters)) / 2.0
        return self.final_momentum + (self.base_momentum - self.final_momentum) * cosine

    def after_train_iter(self, runner, batch_idx: int, data_batch: Optional[dict] = None,
                         outputs: Optional[dict] = None) -> None:
        if not runner.optim_wrapper.should_update():
            return  # gradient accumulation: the student did not change
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        try:
            model.update_teacher(self.momentum(runner.iter, runner.max_iters))
        except FloatingPointError as error:
            raise FloatingPointError(f'iteration {runner.iter + 1} of {runner.max_iters}: '
                                     f'{error}') from None
