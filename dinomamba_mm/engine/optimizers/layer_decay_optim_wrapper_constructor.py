"""Layer-wise lr decay for any model whose backbone reports parameter depths (dense tasks)."""
from functools import partial
from typing import Callable, List, Optional, Tuple

import torch.nn as nn
from mmengine.model import is_model_wrapper
from mmpretrain.engine.optimizers import LearningRateDecayOptimWrapperConstructor

from dinomamba_mm.registry import OPTIM_WRAPPER_CONSTRUCTORS
from .param_group_summary import ParamGroupSummaryMixin

BACKBONE_PREFIX = 'backbone.'


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class LayerDecayOptimWrapperConstructor(ParamGroupSummaryMixin,
                                        LearningRateDecayOptimWrapperConstructor):
    """mmpretrain's layer-wise lr decay, for segmentors and detectors as well as classifiers.

    A parameter at depth ``d`` of ``D`` depths (``get_layer_depth(name) -> (d, D)``) gets
    ``lr = base_lr * layer_decay_rate ** (D - 1 - d)``. mmpretrain's constructor asks the top
    model for ``get_layer_depth``, which mmseg's ``EncoderDecoder`` and mmdet's detectors do
    not have; this one takes it from the model when present, otherwise from ``model.backbone``
    (``DinoVim``, ``LinearViT``, mmpretrain's ``VisionTransformer``), with the ``backbone.``
    prefix. Those backbones put the embeddings at depth 0, block ``i`` at ``i + 1`` and
    everything outside the backbone (neck, heads) at ``D - 1``, i.e. at the full base lr.

    ``paramwise_cfg`` keys are mmpretrain's: ``layer_decay_rate``, ``custom_keys`` (only
    ``decay_mult``), ``norm_decay_mult`` (BN / IN / GN / LayerNorm), ``bias_decay_mult`` and
    ``flat_decay_mult`` (every 1-D parameter: also RMSNorm weights and Mamba's ``A_log``,
    ``D``, ``dt_bias``).

    The groups are logged as a few INFO lines, one per depth (:func:`param_group_summary`;
    mmpretrain lists every parameter at DEBUG level).

    Example::

        optim_wrapper = dict(
            optimizer=dict(type='AdamW', lr=1e-4, weight_decay=0.05),
            constructor='dinomamba_mm.LayerDecayOptimWrapperConstructor',
            paramwise_cfg=dict(layer_decay_rate=0.92, flat_decay_mult=0.,
                               custom_keys={'.pos_embed': dict(decay_mult=0.)}))
    """

    def add_params(self,
                   params: List[dict],
                   module: nn.Module,
                   prefix: str = '',
                   get_layer_depth: Optional[Callable[[str], Tuple[int, int]]] = None,
                   **kwargs) -> None:
        if get_layer_depth is None and prefix == '':
            get_layer_depth = self.find_layer_depth(module)
        super().add_params(params, module, prefix=prefix, get_layer_depth=get_layer_depth,
                           **kwargs)

    @staticmethod
    def find_layer_depth(model: nn.Module) -> Callable[[str], Tuple[int, int]]:
        """``get_layer_depth`` of ``model``, or of ``model.backbone`` bound to its prefix."""
        if is_model_wrapper(model):
            model = model.module
        if hasattr(model, 'get_layer_depth'):
            return model.get_layer_depth
        backbone = getattr(model, 'backbone', None)
        if backbone is not None and hasattr(backbone, 'get_layer_depth'):
            return partial(backbone.get_layer_depth, prefix=BACKBONE_PREFIX)
        raise TypeError(
            f'layer-wise lr decay needs get_layer_depth(param_name) on the model '
            f'({type(model).__name__}) or on its backbone '
            f'({type(backbone).__name__ if backbone is not None else "none"})')
