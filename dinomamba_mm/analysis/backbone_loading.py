"""Build the backbone of any project config and load its weights from a checkpoint."""
from typing import Optional, Tuple

import torch.nn as nn
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmengine.runner import CheckpointLoader

from dinomamba_mm.checkpoints import check_checkpoint_file
from dinomamba_mm.registry import MODELS

#: checkpoint key prefixes of backbones, tried in order by ``prefix='auto'``: the DINO EMA
#: teacher (what the paper evaluates), then a classifier / DINO student / segmentor backbone.
AUTO_PREFIXES = ('teacher.backbone.', 'backbone.')


def backbone_config(cfg: Config) -> Tuple[dict, str]:
    """(backbone config, default scope) of a model config (``cfg.model.backbone``)."""
    model = cfg.get('model')
    if model is None or 'backbone' not in model:
        raise ValueError(f'config {cfg.filename} has no model.backbone')
    return dict(model['backbone']), cfg.get('default_scope', 'mmpretrain')


def build_backbone(cfg: Config, overrides: Optional[dict] = None) -> nn.Module:
    """Build ``cfg.model.backbone`` (with ``overrides``) in the config's default scope.

    ``init_cfg`` is dropped: weights come from :func:`load_backbone_weights`.
    """
    backbone, scope = backbone_config(cfg)
    backbone.pop('init_cfg', None)
    backbone.update(overrides or {})
    with DefaultScope.overwrite_default_scope(scope):
        return MODELS.build(backbone)


def load_backbone_weights(backbone: nn.Module, checkpoint: str, prefix: str = 'auto') -> str:
    """Load the ``prefix`` part of a checkpoint into ``backbone`` strictly.

    Args:
        backbone: the model to fill.
        checkpoint: path or URL of an mmengine checkpoint (or a bare state dict).
        prefix: key prefix of the backbone weights, e.g. 'backbone.' or 'teacher.backbone.';
            'auto' takes the first of :data:`AUTO_PREFIXES` present, else no prefix.

    Returns:
        the prefix used.
    """
    check_checkpoint_file(checkpoint)
    loaded = CheckpointLoader.load_checkpoint(checkpoint, map_location='cpu')
    state = loaded.get('state_dict', loaded) if isinstance(loaded, dict) else loaded
    if prefix == 'auto':
        prefix = next((p for p in AUTO_PREFIXES if any(k.startswith(p) for k in state)), '')
    weights = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    if not weights:
        raise ValueError(f'checkpoint {checkpoint} has no key starting with {prefix!r}; its '
                         f'first keys: {sorted(state)[:5]}')
    backbone.load_state_dict(weights, strict=True)
    return prefix
