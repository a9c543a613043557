"""DINO's gradient clipping: each parameter's gradient norm separately."""
from typing import List, Optional

import torch
from mmengine.hooks import Hook

from dinomamba_mm.argument_checks import check_number
from dinomamba_mm.engine.hook_options import checked_options
from dinomamba_mm.registry import HOOKS


def clip_each_gradient_(grads: List[torch.Tensor], max_norm: float, eps: float = 1e-6) -> None:
    """Scale every gradient ``g`` with ``||g||_2 > max_norm`` by ``max_norm / (||g||_2 + eps)``,
    in place (DINO's ``clip_gradients``)."""
    if not grads:
        return
    # torch's documented (beta) foreach ops, checked with torch 2.14.1 (pinned by
    # test_the_foreach_ops_behave_as_checked): one fused pass per step, where
    # clip_grad_norm_ per parameter would launch five kernels per parameter
    scales = torch._foreach_norm(grads)
    torch._foreach_add_(scales, eps)
    torch._foreach_reciprocal_(scales)
    torch._foreach_mul_(scales, max_norm)
    torch._foreach_clamp_max_(scales, 1.0)
    torch._foreach_mul_(grads, scales)


@HOOKS.register_module()
@checked_options
class PerParameterGradClipHook(Hook):
    """Clip the gradient of each parameter to an L2 norm of ``max_norm``, as DINO does.

    mmengine's ``optim_wrapper.clip_grad=dict(max_norm=...)`` clips the norm of all gradients
    together; DINO's recipe ("grad clip 3.0") clips each parameter's gradient on its own, so a
    large gradient in one tensor does not shrink the others. The clipping runs as an optimizer
    step pre-hook: after the AMP loss scaler unscaled the gradients and, under DDP, after their
    all-reduce, right before the update (the place of DINO's ``clip_gradients``). Use it
    instead of ``clip_grad``, not with it. Stateless.

    Args:
        max_norm (float): Largest L2 norm of each parameter's gradient, > 0. Defaults to 3.0.
    """

    def __init__(self, max_norm: float = 3.0) -> None:
        check_number('max_norm', max_norm, 0, exclusive_minimum=True)
        self.max_norm = float(max_norm)
        self._handle = None

    def before_train(self, runner) -> None:
        if getattr(runner.optim_wrapper, 'clip_grad_kwargs', None):
            raise ValueError('PerParameterGradClipHook clips the gradients itself; remove '
                             f'optim_wrapper.clip_grad={runner.optim_wrapper.clip_grad_kwargs}')
        optimizer = runner.optim_wrapper.optimizer
        self._handle = optimizer.register_step_pre_hook(self._clip)

    def after_train(self, runner) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _clip(self, optimizer: torch.optim.Optimizer, args, kwargs) -> Optional[tuple]:
        grads = [p.grad for group in optimizer.param_groups for p in group['params']
                 if p.grad is not None]
        clip_each_gradient_(grads, self.max_norm)
        return None
