"""A linear-probe classifier that also loads the linear heads DINO's eval_linear writes."""
from typing import Dict, Optional

import torch
import torch.nn as nn
from mmengine.logging import print_log
from mmpretrain.models.classifiers import ImageClassifier

from dinomamba_mm.checkpoints import CheckpointError
from dinomamba_mm.finite_checks import non_finite_tensors
from dinomamba_mm.models.backbones.frozen_backbone import FrozenBackbone
from dinomamba_mm.registry import MODELS

#: keys of DINO's ``LinearClassifier`` (``self.linear = nn.Linear(dim, num_labels)``)
DINO_LINEAR_KEYS = ('linear.weight', 'linear.bias')


@MODELS.register_module()
class LinearProbeClassifier(ImageClassifier):
    """mmpretrain's ImageClassifier on a :class:`FrozenBackbone` with a linear head, that also
    loads a head trained by DINO's ``eval_linear`` (the Dino-Mamba paper's linear probes).

    eval_linear saves ``checkpoint.pth.tar``: ``state_dict`` = its ``LinearClassifier`` wrapped in
    DistributedDataParallel, ``{'module.linear.weight': (num_classes, C), 'module.linear.bias':
    (num_classes, )}``, with ``epoch``, ``best_acc`` and the optimizer / scheduler states. Loaded as
    this model's checkpoint (``load_from``, ``tools/test.py CONFIG FILE``, mmpretrain's
    ``get_model(CONFIG, pretrained=FILE)``), its two tensors become ``head.fc`` and the backbone
    weights come from the FrozenBackbone's ``checkpoint`` (the DINO teacher the head was trained
    on; its recorded token layout is checked), so that every key of the model is filled and
    strict loading passes. Any other checkpoint loads as into ImageClassifier.

    Args: those of ``ImageClassifier``; ``backbone`` must build a FrozenBackbone and ``head`` a
    head with a linear layer ``fc`` (mmpretrain's ``LinearClsHead``), fed C = blocks read x
    backbone width features per image.
    """

    def __init__(self, backbone: dict, neck: Optional[dict] = None, head: Optional[dict] = None,
                 **kwargs) -> None:
        super().__init__(backbone=backbone, neck=neck, head=head, **kwargs)
        if not isinstance(self.backbone, FrozenBackbone):
            raise TypeError('LinearProbeClassifier needs backbone=dict(type='
                            "'dinomamba_mm.FrozenBackbone', ...), got "
                            f'{type(self.backbone).__name__}')
        if not isinstance(getattr(self.head, 'fc', None), nn.Linear):
            raise TypeError('LinearProbeClassifier needs a head with a linear layer fc (e.g. '
                            f"'LinearClsHead'), got {type(self.head).__name__}")
        self._register_load_state_dict_pre_hook(self._load_dino_linear_head)

    def _load_dino_linear_head(self, state_dict: Dict[str, torch.Tensor], prefix: str,
                               *args) -> None:
        ours = {key: key[len(prefix):] for key in state_dict if key.startswith(prefix)}
        names = {key: name[len('module.'):] if name.startswith('module.') else name
                 for key, name in ours.items()}
        if sorted(names.values()) != sorted(DINO_LINEAR_KEYS):
            return
        tensors = {name: state_dict.pop(key) for key, name in names.items()}
        bad = [list(tensors)[i] for i in non_finite_tensors(list(tensors.values()))]
        if bad:  # mmpretrain's get_model loads through here without our checks
            raise CheckpointError(f'the DINO linear head holds NaN or Inf values: '
                                  f'[{", ".join(bad)}]; expected the finite head eval_linear '
                                  'writes')
        weight, bias = tensors['linear.weight'], tensors['linear.bias']
        fc = self.head.fc
        if weight.shape != fc.weight.shape or bias.shape != fc.bias.shape:
            raise ValueError(
                f'the DINO linear head has weight {tuple(weight.shape)} and bias '
                f'{tuple(bias.shape)}, this classifier\'s head.fc needs '
                f'{tuple(fc.weight.shape)} and {tuple(fc.bias.shape)} (num_classes x C, C = '
                'blocks read x backbone width): the head was trained on another backbone, '
                'another number of blocks or another class count')
        backbone = self.backbone.checkpoint_state_dict()
        state_dict.update({f'{prefix}backbone.backbone.{k}': v for k, v in backbone.items()})
        state_dict[f'{prefix}head.fc.weight'] = weight
        state_dict[f'{prefix}head.fc.bias'] = bias
        print_log(f'loaded a DINO eval_linear head {tuple(weight.shape)} into head.fc and the '
                  f'backbone from {self.backbone.checkpoint}', logger='current')
