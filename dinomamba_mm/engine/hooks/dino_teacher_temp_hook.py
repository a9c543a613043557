"""DINO's teacher temperature warm-up."""
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.runner import IterBasedTrainLoop

from dinomamba_mm.argument_checks import check_int, check_number
from dinomamba_mm.engine.hook_options import checked_options
from dinomamba_mm.registry import HOOKS


@HOOKS.register_module()
@checked_options
class DINOTeacherTempHook(Hook):
    """Set the teacher temperature of the loss head at the start of every epoch.

    For epoch ``e`` (0-based) and ``W = warmup_epochs`` (DINO's ``np.linspace`` warm-up,
    both ends included)::

        temp(e) = warmup + (teacher_temp - warmup) * e / (W - 1)   if e < W
        temp(e) = teacher_temp                                     otherwise

    with ``warmup = warmup_teacher_temp`` (``W == 1`` gives ``warmup`` for epoch 0). The value
    is written into ``model.head.teacher_temp`` (a buffer of :class:`DINOLossHead`).
    Stateless: a resumed run gets the same values. The paper's recipe keeps 0.04 throughout
    (``warmup_epochs=0``); DINO's own default is 0.04 -> 0.07 over 30 epochs.

    Args:
        warmup_teacher_temp (float): Temperature at epoch 0. Defaults to 0.04.
        teacher_temp (float): Temperature after the warm-up. Defaults to 0.04.
        warmup_epochs (int): Length of the warm-up in epochs. Defaults to 0.
    """

    def __init__(self, warmup_teacher_temp: float = 0.04, teacher_temp: float = 0.04,
                 warmup_epochs: int = 0) -> None:
        check_number('warmup_teacher_temp', warmup_teacher_temp, 0, exclusive_minimum=True)
        check_number('teacher_temp', teacher_temp, 0, exclusive_minimum=True)
        check_int('warmup_epochs', warmup_epochs, 0)
        self.warmup_teacher_temp = warmup_teacher_temp
        self.teacher_temp = teacher_temp
        self.warmup_epochs = warmup_epochs

    def temperature(self, epoch: int) -> float:
        """Teacher temperature of ``epoch``."""
        if epoch >= self.warmup_epochs:
            return self.teacher_temp
        if self.warmup_epochs == 1:
            return self.warmup_teacher_temp
        return self.warmup_teacher_temp + (self.teacher_temp - self.warmup_teacher_temp) * (
            epoch / (self.warmup_epochs - 1))

    def before_train(self, runner) -> None:
        if self.warmup_epochs and isinstance(runner.train_loop, IterBasedTrainLoop):
            raise ValueError('DINOTeacherTempHook counts epochs; with IterBasedTrainLoop the '
                             f'epoch never advances, so warmup_epochs={self.warmup_epochs} '
                             'would never end (use warmup_epochs=0 or an EpochBasedTrainLoop)')

    def before_train_epoch(self, runner) -> None:
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        model.head.teacher_temp.fill_(self.temperature(runner.epoch))
