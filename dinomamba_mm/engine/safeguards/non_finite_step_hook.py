"""Skip training steps whose loss or gradients are not finite; stop when they persist."""
from typing import Dict, Optional

import numpy as np
import torch
from mmengine import dist
from mmengine.hooks import Hook
from mmengine.logging import HistoryBuffer, print_log
from mmengine.model import is_model_wrapper

from dinomamba_mm.argument_checks import check_int
from dinomamba_mm.finite_checks import non_finite_tensors
from dinomamba_mm.registry import HOOKS


#: runtime-info key of the count of bad iterations in a row
COUNT_KEY = 'non_finite_consecutive'


@HOOKS.register_module()
class NonFiniteStepHook(Hook):
    """Keep one bad batch from ruining a run: non-finite steps are skipped, and a run that
    keeps producing them (or whose weights became non-finite) stops with an error.

    - Before every optimizer step (an optimizer step pre-hook: after the AMP unscaling and,
      under DDP, after the gradient all-reduce, so every process decides alike), gradients
      holding a NaN or an infinity are dropped (set to None): the optimizer then leaves every
      parameter and its state untouched, as if the step had not happened.
    - After every iteration, a non-finite loss on any process, or a skipped step, counts as a
      bad iteration (logged as a warning, counted in the logged scalar ``skipped_steps``; its
      non-finite losses are taken out of the logged, window-averaged ones, which would read
      nan for the rest of the window). ``max_consecutive_skips + 1`` bad iterations in a
      row raise ``FloatingPointError`` naming the iteration; with 0 the first one does (DINO's
      own behaviour). A good iteration resets the count. The count is kept in the message hub's
      runtime info, so a resumed run continues it.
    - After every optimizer step, parameters that became non-finite (a diverging learning
      rate) raise ``FloatingPointError`` at once, naming the iteration and the parameters:
      that cannot be undone by skipping, and no checkpoint of the broken weights is written
      (the error comes before ``CheckpointHook``).

    The iteration named is 1-based, as in the logs and in ``iter_N.pth``. With
    :class:`DINO`, the centre (:class:`DINOLossHead`) and the teacher
    (:meth:`DINO.update_teacher`) refuse non-finite updates on their own as well.

    Args:
        max_consecutive_skips (int): Bad iterations in a row that are skipped; the next one
            stops training. Defaults to 5.
    """

    # after RuntimeInfoHook (which records the losses to log), before DINOTeacherEMAHook,
    # PerParameterGradClipHook and checkpoints
    priority = 'ABOVE_NORMAL'

    def __init__(self, max_consecutive_skips: int = 5) -> None:
        check_int('max_consecutive_skips', max_consecutive_skips, 0)
        self.max_consecutive_skips = max_consecutive_skips
        self.consecutive = 0
        self._runner = None
        self._skipped: Optional[str] = None
        self._handles: list = []
        self._names: Dict[int, str] = {}

    def before_train(self, runner) -> None:
        self._runner = runner
        self.consecutive = runner.message_hub.get_info(COUNT_KEY, 0)  # restored on resume
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        self._names = {id(p): name for name, p in model.named_parameters()}
        optimizer = runner.optim_wrapper.optimizer
        self._handles = [optimizer.register_step_pre_hook(self._drop_non_finite_gradients),
                         optimizer.register_step_post_hook(self._check_parameters)]

    def after_train(self, runner) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _iteration(self) -> str:
        runner = self._runner
        return f'iteration {runner.iter + 1} of {runner.max_iters}'

    def _drop_non_finite_gradients(self, optimizer: torch.optim.Optimizer, args,
                                   kwargs) -> Optional[tuple]:
        params = [p for group in optimizer.param_groups for p in group['params']
                  if p.grad is not None]
        bad = non_finite_tensors([p.grad for p in params])
        if bad:
            for param in params:
                param.grad = None
            self._skipped = (f'{len(bad)} of {len(params)} gradients not finite (first: '
                             f'{self._name(params[bad[0]])}), the optimizer step skipped')
        return None

    def _check_parameters(self, optimizer: torch.optim.Optimizer, args, kwargs) -> None:
        params = [p for group in optimizer.param_groups for p in group['params']]
        bad = non_finite_tensors([p.detach() for p in params])
        if bad:
            names = [self._name(params[i]) for i in bad]
            raise FloatingPointError(
                f'{self._iteration()}: the optimizer step made {len(bad)} of {len(params)} '
                f'parameters non-finite ({", ".join(names[:5])}'
                f'{", ..." if len(names) > 5 else ""}): the learning rate is probably too '
                'high; training stopped before any checkpoint of these weights was written')

    def _name(self, param: torch.Tensor) -> str:
        return self._names.get(id(param), f'a {tuple(param.shape)} parameter')

    def after_train_iter(self, runner, batch_idx: int, data_batch=None,
                         outputs: Optional[dict] = None) -> None:
        loss = (outputs or {}).get('loss')
        local_bad = loss is not None and not bool(torch.isfinite(torch.as_tensor(loss)).all())
        any_bad = torch.tensor(float(local_bad))
        dist.all_reduce(any_bad, op='max')  # one process's NaN makes the iteration bad for all
        skipped, self._skipped = self._skipped, None
        self.consecutive = 0 if skipped is None and not any_bad.item() else self.consecutive + 1
        runner.message_hub.update_info(COUNT_KEY, self.consecutive)
        if not self.consecutive:
            return
        self._unlog_non_finite(runner, outputs or {})
        parts = []
        if any_bad.item():
            parts.append(f'loss {float(torch.as_tensor(loss).detach())}' if local_bad else
                         'a non-finite loss on another process')
        if skipped is not None:
            parts.append(skipped)
        what = '; '.join(parts)
        message = (f'{self._iteration()}: {what}; {self.consecutive} bad iteration(s) in a '
                   f'row (max_consecutive_skips={self.max_consecutive_skips})')
        if self.consecutive > self.max_consecutive_skips:
            raise FloatingPointError(
                f'{message}: training stopped. Look for NaN / inf in the data or lower the '
                'learning rate, then resume from the last checkpoint')
        print_log(message, logger='current', level=30)

    @staticmethod
    def _unlog_non_finite(runner, outputs: dict) -> None:
        hub = runner.message_hub
        for key in [f'train/{name}' for name in outputs if f'train/{name}' in hub.log_scalars]:
            values, counts = hub.log_scalars[key].data
            if not np.isfinite(values[-1]):
                buffer = hub.log_scalars.pop(key)
                if len(values) > 1:
                    hub.log_scalars[key] = HistoryBuffer(values[:-1], counts[:-1],
                                                         buffer.max_length)
        skipped = hub.log_scalars.get('train/skipped_steps')
        hub.update_scalar('train/skipped_steps', skipped.current() + 1 if skipped else 1)
