"""A frozen backbone for linear probing, optionally loaded from a DINO checkpoint's teacher."""
from typing import Dict, Optional

import torch
from mmengine.model import BaseModule
from mmengine.runner.checkpoint import _load_checkpoint

from dinomamba_mm.models.selfsup.dino_teacher_checkpoint import (
    teacher_backbone_layout, teacher_backbone_path, teacher_backbone_state_dict)
from dinomamba_mm.registry import MODELS
from .layout_record import check_layout


@MODELS.register_module()
class FrozenBackbone(BaseModule):
    """Wrap a backbone so that it is never trained: the linear-probe protocol of DINO.

    The wrapped backbone has ``requires_grad=False`` from construction on (so optimizers and
    DistributedDataParallel never see it), always stays in eval mode (no drop path, no
    dropout) and runs under ``torch.no_grad()``. :meth:`init_weights` first lets the backbone
    initialise itself, then, when ``checkpoint`` is given, loads the teacher backbone of that
    DINO checkpoint strictly (every key must match); with ``checkpoint=None`` the backbone keeps
    its random initialisation (the random-init baseline). A token layout recorded in the
    checkpoint (the paper's raw files: 'paper') must be the backbone's.

    The wrapped module is ``self.backbone``, so in a classifier's state dict its keys read
    ``backbone.backbone.*``.

    Args:
        backbone (dict): config of the backbone to freeze.
        checkpoint (str, optional): DINO checkpoint (ours, the DINO/paper layout with a
            ``'teacher'`` entry, or a backbone-only one); see
            :mod:`dinomamba_mm.models.selfsup.dino_teacher_checkpoint`.
        prefix (str, optional): key prefix of the backbone weights in the checkpoint's
            ``state_dict``; None detects it.
    """

    def __init__(self, backbone: dict, checkpoint: Optional[str] = None,
                 prefix: Optional[str] = None) -> None:
        super().__init__(init_cfg=None)
        if not isinstance(backbone, dict):
            raise TypeError('backbone must be a config dict, got '
                            f'{type(backbone).__name__}')
        self.backbone = MODELS.build(backbone)
        self.checkpoint = checkpoint
        self.prefix = prefix
        self.backbone.requires_grad_(False)
        self.backbone.eval()

    def checkpoint_state_dict(self) -> Dict[str, torch.Tensor]:
        """The backbone weights of ``checkpoint`` (keys as in ``self.backbone``).

        Raises:
            ValueError: when the checkpoint records another token layout than the backbone's
                (see :mod:`.layout_record`; the paper's raw files are 'paper').
        """
        if self.checkpoint is None:
            raise ValueError(f'this FrozenBackbone ({type(self.backbone).__name__}) has no '
                             'checkpoint to take the backbone weights from')
        loaded = _load_checkpoint(self.checkpoint, map_location='cpu')
        state = teacher_backbone_state_dict(loaded, self.prefix, source=self.checkpoint)
        check_layout(self.backbone, teacher_backbone_layout(loaded, state, self.prefix),
                     self.checkpoint, teacher_backbone_path(loaded, self.prefix))
        return state

    def init_weights(self) -> None:
        super().init_weights()
        if self.checkpoint is None:
            return
        state = self.checkpoint_state_dict()
        try:
            result = self.backbone.load_state_dict(state, strict=False)
        except RuntimeError as error:  # shape mismatches
            raise ValueError(f'checkpoint {self.checkpoint} does not fit the '
                             f'backbone {type(self.backbone).__name__}: '
                             f'{error}') from error
        if result.missing_keys or result.unexpected_keys:
            raise ValueError(
                f'checkpoint {self.checkpoint} does not fit the backbone '
                f'{type(self.backbone).__name__}: missing keys '
                f'{result.missing_keys[:10]} ({len(result.missing_keys)}), '
                f'unexpected keys {result.unexpected_keys[:10]} '
                f'({len(result.unexpected_keys)})')

    def train(self, mode: bool = True) -> 'FrozenBackbone':
        super().train(mode)
        self.backbone.eval()
        return self

    def forward(self, inputs: torch.Tensor):
        """Backbone outputs of (B, 3, H, W) images, computed without autograd."""
        with torch.no_grad():
            return self.backbone(inputs)
