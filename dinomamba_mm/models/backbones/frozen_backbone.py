"""A frozen backbone for linear probing, optionally loaded from a DINO checkpoint's teacher."""
import os
from typing import Dict, Optional

import torch
from mmengine.model import BaseModule

from dinomamba_mm.checkpoints import find_checked, load_checkpoint_into
from dinomamba_mm.registry import MODELS


@MODELS.register_module()
class FrozenBackbone(BaseModule):
    """Wrap a backbone so that it is never trained: the linear-probe protocol of DINO.

    The wrapped backbone has ``requires_grad=False`` from construction on (so optimizers and
    DistributedDataParallel never see it), always stays in eval mode (no drop path, no
    dropout) and runs under ``torch.no_grad()``. :meth:`init_weights` first lets the backbone
    initialise itself, then, when ``checkpoint`` is given, loads the teacher backbone of that
    DINO checkpoint strictly (every key must match); with ``checkpoint=None`` the backbone keeps
    its random initialisation (the random-init baseline). The checkpoint goes through
    :func:`dinomamba_mm.checkpoints.load_checkpoint_into` (its token layout must be the
    backbone's, its tensors finite). With a ``checkpoint``, the forward refuses to run until the
    backbone's weights were loaded, by :meth:`init_weights` or by a state dict holding all of
    them (a whole classifier's checkpoint, a released linear head with its teacher): mmpretrain's
    ``get_model`` never calls ``init_weights``, so the features of random weights came out.

    The wrapped module is ``self.backbone``, so in a classifier's state dict its keys read
    ``backbone.backbone.*``.

    Args:
        backbone (dict): config of the backbone to freeze.
        checkpoint (str, optional): DINO checkpoint (ours, the DINO/paper layout with a
            ``'teacher'`` entry, or a backbone-only one); see
            :mod:`dinomamba_mm.checkpoints.backbone_weights`.
        prefix (str, optional): key prefix of the backbone weights in the checkpoint's
            ``state_dict``; None detects it (``teacher.backbone.``, else ``backbone.``).
    """

    def __init__(self, backbone: dict, checkpoint: Optional[str] = None,
                 prefix: Optional[str] = None) -> None:
        super().__init__(init_cfg=None)
        if not isinstance(backbone, dict):
            raise TypeError('backbone must be a config dict, got '
                            f'{type(backbone).__name__}')
        if checkpoint is not None and not isinstance(checkpoint, (str, os.PathLike)):
            raise TypeError('checkpoint must be None or a path or URL (str or os.PathLike), got '
                            f'{checkpoint!r}')
        if prefix is not None and not isinstance(prefix, str):
            raise TypeError(f"prefix must be None, 'auto' or a key prefix (str), got {prefix!r}")
        self.backbone = MODELS.build(backbone)
        self.checkpoint = checkpoint
        self.prefix = 'auto' if prefix is None else prefix
        self.backbone.requires_grad_(False)
        self.backbone.eval()
        self.weights_loaded = checkpoint is None
        self.backbone._register_load_state_dict_pre_hook(self._note_loaded_weights)

    def checkpoint_state_dict(self) -> Dict[str, torch.Tensor]:
        """The checked backbone weights of ``checkpoint`` (keys as in ``self.backbone``)."""
        if self.checkpoint is None:
            raise ValueError(f'this FrozenBackbone ({type(self.backbone).__name__}) has no '
                             'checkpoint to take the backbone weights from')
        return find_checked(self.backbone, self.checkpoint, self.prefix).state_dict

    def init_weights(self) -> None:
        super().init_weights()
        if self.checkpoint is not None:
            load_checkpoint_into(self.backbone, self.checkpoint, self.prefix)
            self.weights_loaded = True

    def _note_loaded_weights(self, state_dict, prefix: str, *args) -> None:
        """Pre-hook of the wrapped backbone: a state dict holding all its keys loads it."""
        if all(prefix + key in state_dict for key in self.backbone.state_dict()):
            self.weights_loaded = True

    def train(self, mode: bool = True) -> 'FrozenBackbone':
        super().train(mode)
        self.backbone.eval()
        return self

    def forward(self, inputs: torch.Tensor):
        """Backbone outputs of (B, 3, H, W) images, computed without autograd.

        Raises:
            RuntimeError: the backbone's weights were never loaded from ``checkpoint``.
        """
        if not self.weights_loaded:
            raise RuntimeError(
                f'FrozenBackbone: the weights of its {type(self.backbone).__name__} were never '
                f'loaded from checkpoint={self.checkpoint!r}, so its features would be those of '
                'random weights. The model was built without init_weights() (mmpretrain\'s '
                'get_model does not call it; the Runner does) and no checkpoint holding them '
                'was loaded: call model.init_weights(), load a checkpoint of the whole model, '
                "or build it with the backbone's checkpoint=None for random features")
        with torch.no_grad():
            return self.backbone(inputs)
