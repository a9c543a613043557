"""The backbone of a head trained on features extracted once: it passes them through."""
from typing import Tuple

import torch
from mmengine.model import BaseModule

from dinomamba_mm.registry import MODELS


@MODELS.register_module()
class PrecomputedFeatures(BaseModule):
    """Return the batch of precomputed features as the one output of a backbone.

    A linear probe or a segmentation head on a frozen backbone computes the backbone's features
    of every image once (:class:`dinomamba_mm.datasets.PrecomputedFeatureDataset` reads them);
    with this module in the backbone's place, mmpretrain's ``ImageClassifier`` and mmseg's
    ``EncoderDecoder`` train and score their necks and heads on those features as they would on
    a frozen backbone's outputs. It has no parameters.

    Shapes: (B, C) class tokens or (B, C, h, w) patch-token maps -> the same tensor, in a tuple
    of one (the ``out_indices=-1`` output of a backbone).
    """

    def forward(self, inputs: torch.Tensor) -> Tuple[torch.Tensor]:
        if not isinstance(inputs, torch.Tensor) or inputs.dim() not in (2, 4):
            raise TypeError(
                'PrecomputedFeatures expects a batch of features, a (B, C) or (B, C, h, w) '
                f'tensor, got {getattr(inputs, "shape", type(inputs).__name__)}; use '
                "collate_fn=dict(type='default_collate') and a data preprocessor that does not "
                'normalise images (mmengine.BaseDataPreprocessor)')
        return (inputs, )
