"""Build the backbone of any project config (weights: ``checkpoints.load_checkpoint_into``)."""
from typing import Optional, Tuple

import torch.nn as nn
from mmengine.config import Config
from mmengine.registry import DefaultScope

from dinomamba_mm.registry import MODELS


def backbone_config(cfg: Config) -> Tuple[dict, str]:
    """(backbone config, default scope) of a model config (``cfg.model.backbone``)."""
    model = cfg.get('model')
    if model is None or 'backbone' not in model:
        raise ValueError(f'config {cfg.filename} has no model.backbone')
    return dict(model['backbone']), cfg.get('default_scope', 'mmpretrain')


def build_backbone(cfg: Config, overrides: Optional[dict] = None) -> nn.Module:
    """Build ``cfg.model.backbone`` (with ``overrides``) in the config's default scope.

    ``init_cfg`` is dropped: the tools load the weights they are given.
    """
    backbone, scope = backbone_config(cfg)
    backbone.pop('init_cfg', None)
    backbone.update(overrides or {})
    with DefaultScope.overwrite_default_scope(scope):
        return MODELS.build(backbone)
