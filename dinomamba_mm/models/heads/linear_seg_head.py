"""A linear classifier of every patch token: the decode head of a dense linear probe."""
from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from mmengine.model import BaseModule
from torch import nn

from dinomamba_mm.argument_checks import check_bool, check_int, check_number
from dinomamba_mm.registry import MODELS


@MODELS.register_module()
class LinearSegHead(BaseModule):
    """A 1 x 1 convolution over one backbone output, as the ``decode_head`` of mmseg's
    ``EncoderDecoder``: each patch's class logits are a linear function of its features.

    Training resizes the logits bilinearly to the label map and takes the cross-entropy of
    every pixel, averaged over all of them (an ignored pixel counts as 0, mmseg's default);
    prediction resizes them to the input's size (``img_shape``, or ``pad_shape`` when present,
    as mmseg's heads; a ``torch.Size`` ``img_shape`` is a sliding-window crop's). These are
    the logits, loss and predictions of mmseg's ``FCNHead`` with ``num_convs=0``,
    ``concat_input=False`` and no dropout. Ours exists because every training step of mmseg's
    decode heads also computes the batch's pixel accuracy for the log, a top-k over the resized
    logits that is a large part of a head this small's training on a CPU, and because importing
    mmseg's heads needs mmcv's compiled ops, which ``dinomamba_mm.models`` must not.

    Shapes: ``inputs[in_index]`` (B, in_channels, h, w) -> logits (B, num_classes, h, w).

    Args:
        in_channels (int): Channels of the backbone output read.
        num_classes (int): Classes of the label maps (>= 2; ids outside [0, num_classes) other
            than ``ignore_index`` are an error of the loss).
        in_index (int): Which backbone output to read. Defaults to -1.
        align_corners (bool): ``align_corners`` of the bilinear resizes. Defaults to False.
        ignore_index (int): The label id left out of the loss. Defaults to 255.
        loss_weight (float): Factor of the cross-entropy. Defaults to 1.0.
        init_cfg (dict, optional): mmengine init config; None gives a normal init of std 0.01
            and zero bias, as mmseg's decode heads. Defaults to None.
    """

    def __init__(self, in_channels: int, num_classes: int, in_index: int = -1,
                 align_corners: bool = False, ignore_index: int = 255, loss_weight: float = 1.0,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(init_cfg=init_cfg or dict(type='Normal', layer='Conv2d', std=0.01))
        check_int('in_channels', in_channels, 1)
        check_int('num_classes', num_classes, 2)
        check_int('in_index', in_index)
        check_bool('align_corners', align_corners)
        check_int('ignore_index', ignore_index)
        check_number('loss_weight', loss_weight, 0, exclusive_minimum=True)
        self.in_index = in_index
        self.num_classes = num_classes
        self.out_channels = num_classes  # mmseg's EncoderDecoder reads both
        self.align_corners = align_corners
        self.ignore_index = ignore_index
        self.loss_weight = float(loss_weight)
        self.conv_seg = nn.Conv2d(in_channels, num_classes, kernel_size=1)

    def forward(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        return self.conv_seg(inputs[self.in_index])

    def loss(self, inputs: Sequence[torch.Tensor], batch_data_samples: list,
             train_cfg: dict) -> dict:
        """``dict(loss_ce=...)`` of a batch whose ``SegDataSample``'s hold ``gt_sem_seg``
        (1, H, W)."""
        labels = torch.stack([sample.gt_sem_seg.data[0] for sample in batch_data_samples])
        logits = F.interpolate(self.forward(inputs), size=labels.shape[1:], mode='bilinear',
                               align_corners=self.align_corners)
        per_pixel = F.cross_entropy(logits, labels.long(), reduction='none',
                                    ignore_index=self.ignore_index)
        return dict(loss_ce=self.loss_weight * per_pixel.mean())

    def predict(self, inputs: Sequence[torch.Tensor], batch_img_metas: List[dict],
                test_cfg: dict) -> torch.Tensor:
        """Logits (B, num_classes, H, W) at the size of the batch's inputs."""
        meta = batch_img_metas[0]
        size = meta['img_shape']
        if not isinstance(size, torch.Size) and 'pad_shape' in meta:
            size = meta['pad_shape'][:2]
        return F.interpolate(self.forward(inputs), size=tuple(size), mode='bilinear',
                             align_corners=self.align_corners)
