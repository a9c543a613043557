"""mmengine's default optimizer wrapper constructor, logging a summary of its parameter groups."""
from mmengine.optim import DefaultOptimWrapperConstructor

from dinomamba_mm.registry import OPTIM_WRAPPER_CONSTRUCTORS
from .param_group_summary import ParamGroupSummaryMixin


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class TrainableOptimWrapperConstructor(ParamGroupSummaryMixin, DefaultOptimWrapperConstructor):
    """``DefaultOptimWrapperConstructor`` (same arguments, same param groups) that logs a few
    lines on the groups (:func:`param_group_summary`) instead of one per parameter.

    mmengine logs an INFO line for each parameter a ``paramwise_cfg`` rule applies to and a
    warning for each parameter that does not require a gradient: for DINO (no weight decay on
    biases and 1-D parameters; the EMA teacher, a copy of the student, frozen) several hundred
    lines in every training log. The summary names the frozen parameters instead.
    """
