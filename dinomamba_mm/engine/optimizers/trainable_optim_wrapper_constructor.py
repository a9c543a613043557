"""mmengine's default optimizer wrapper constructor over the trainable sub-modules only."""
from typing import List, Optional, Union

from mmengine.optim import DefaultOptimWrapperConstructor
from torch import nn

from dinomamba_mm.registry import OPTIM_WRAPPER_CONSTRUCTORS


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class TrainableOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """``DefaultOptimWrapperConstructor`` (same arguments, same param groups) that skips, in
    silence, a sub-module none of whose parameters requires a gradient.

    mmengine logs a warning for every such parameter: for DINO's EMA teacher, a copy of the
    student, that is one line per student parameter (several hundred) in every training log.
    """

    def add_params(self, params: List[dict], module: nn.Module, prefix: str = '',
                   is_dcn_module: Optional[Union[int, float]] = None) -> None:
        if any(param.requires_grad for param in module.parameters()):
            super().add_params(params, module, prefix, is_dcn_module)
