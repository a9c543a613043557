"""Build the backbone of any project config, with the weights of a checkpoint or at random."""
from typing import Optional, Tuple

import torch.nn as nn
from mmengine.config import Config
from mmengine.registry import DefaultScope

from dinomamba_mm.checkpoints import load_checkpoint_into
from dinomamba_mm.registry import MODELS

#: the normalisation of the ImageNet-pretrained models (RGB mean and std, 0-255 scale)
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)


def backbone_config(cfg: Config) -> Tuple[dict, str]:
    """(backbone config, default scope) of a model config (``cfg.model.backbone``)."""
    model = cfg.get('model')
    if model is None or 'backbone' not in model:
        raise ValueError(f'config {cfg.filename} has no model.backbone')
    return dict(model['backbone']), cfg.get('default_scope', 'mmpretrain')


def build_backbone(cfg: Config, checkpoint: Optional[str] = None, prefix: Optional[str] = 'auto',
                   name: str = '') -> nn.Module:
    """Build ``cfg.model.backbone`` in the config's default scope, with the weights of
    ``checkpoint`` (:func:`dinomamba_mm.checkpoints.load_checkpoint_into`, key ``prefix``) or
    its random initialisation without one, and print which (after ``name``).

    The config's ``init_cfg`` is dropped: the tools load the weights they are given.
    """
    backbone, scope = backbone_config(cfg)
    backbone.pop('init_cfg', None)
    with DefaultScope.overwrite_default_scope(scope):
        model = MODELS.build(backbone)
    if checkpoint:
        found = load_checkpoint_into(model, checkpoint, prefix).module_path
        print(f'{name}loaded {checkpoint} (from {found or "its top level"})')
    else:
        print(f'{name}no checkpoint: random initialisation')
    return model
