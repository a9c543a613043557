"""Keep the projection head's last layer fixed during the first epochs (DINO)."""
from typing import List

from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.runner import IterBasedTrainLoop
from torch import nn

from dinomamba_mm.argument_checks import check_int
from dinomamba_mm.engine.hook_options import checked_options
from dinomamba_mm.registry import HOOKS


@HOOKS.register_module()
@checked_options
class FreezeLastLayerHook(Hook):
    """Drop the gradients of one module while ``epoch < freeze_epochs``.

    DINO cancels the gradients of the projection head's last layer during the first epoch.
    The gradients are set to ``None`` right before ``optimizer.step()`` (an optimizer step
    pre-hook; after gradient clipping and, under DDP, after the all-reduce, as in DINO), so
    the optimizer skips those parameters entirely: no update, no weight decay, no moment
    statistics. Stateless (reads ``runner.epoch``), so resumed runs behave the same.
    Unwraps DDP models.

    Args:
        freeze_epochs (int): Number of leading epochs with the module frozen. Defaults to 1.
        module_name (str): Dotted name of the module in the model; the default is the last
            layer of the student's :class:`DINOProjectionHead` in :class:`DINO`.
            Defaults to 'neck.last_layer'.
    """

    def __init__(self, freeze_epochs: int = 1, module_name: str = 'neck.last_layer') -> None:
        check_int('freeze_epochs', freeze_epochs, 0)
        if not isinstance(module_name, str) or not module_name:
            raise TypeError('module_name must be the dotted name of a module (a non-empty '
                            f'str), got {module_name!r}')
        self.freeze_epochs = freeze_epochs
        self.module_name = module_name
        self._handle = None

    def before_train(self, runner) -> None:
        if self.freeze_epochs and isinstance(runner.train_loop, IterBasedTrainLoop):
            raise ValueError('FreezeLastLayerHook counts epochs; with IterBasedTrainLoop the '
                             f'epoch never advances, so freeze_epochs={self.freeze_epochs} '
                             'would freeze the layer for the whole run (use freeze_epochs=0 '
                             'or an EpochBasedTrainLoop)')
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        try:
            module = model.get_submodule(self.module_name)
        except AttributeError as err:
            raise ValueError(f'module_name={self.module_name!r} is not a submodule of '
                             f'{type(model).__name__}') from err
        params: List[nn.Parameter] = list(module.parameters())

        def drop_grads(optimizer, args, kwargs) -> None:
            if runner.epoch < self.freeze_epochs:
                for param in params:
                    param.grad = None

        self._handle = runner.optim_wrapper.optimizer.register_step_pre_hook(drop_grads)

    def after_train(self, runner) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
