"""A model that runs a backbone and returns class-token maps per image, for BinaryAUC."""
from typing import List, Optional, Sequence, Union

import torch
import torch.nn as nn
from mmengine.model import BaseModel
from mmengine.structures import BaseDataElement

from dinomamba_mm.argument_checks import check_choice
from dinomamba_mm.registry import MODELS
from .class_token_maps import MAP_TYPES, extract_class_token_maps


@MODELS.register_module()
class ClassTokenMapModel(BaseModel):
    """Backbone -> class-token maps of chosen blocks, written into each data sample.

    Only ``mode='predict'`` exists (an analysis model has no loss). Each data sample gets

    - ``pred_map``: float32 tensor (num_layers, K, h, w) over the patch grid (K = 1 for
      similarity maps of a class token, heads [x directions] [x registers] for attention maps);
    - metainfo ``map_layer_ids`` (block indices), ``map_names`` (K labels such as 'cls',
      'head3', 'combined_head0') and ``map_extent``: the (height, width) in input pixels the grid
      covers from the top-left corner (grid x patch stride, which may exceed the padded input
      when the backbone pads to whole patches).

    ``BinaryAUC`` reads these fields together with mmseg's ``gt_sem_seg``, ``img_shape`` and
    ``ori_shape``, so the model drops into an mmseg test pipeline (``LoadAnnotations`` +
    ``PackSegInputs``) with ``SegDataPreProcessor``.

    Checkpoints of mmpretrain classifiers / our DINO student load as they are: the backbone
    lives under ``backbone.`` like theirs.

    In a test config (mmseg scope, run by ``tools/test.py``)::

        custom_imports = dict(imports=['dinomamba_mm', 'dinomamba_mm.analysis'],
                              allow_failed_imports=False)
        model = dict(
            type='dinomamba_mm.ClassTokenMapModel',
            backbone=dict(type='dinomamba_mm.DinoVim', arch='base', img_size=512),
            map_type='attention', layer_indices=[5, 11, 23],
            data_preprocessor=dict(type='SegDataPreProcessor', mean=[123.675, 116.28, 103.53],
                                   std=[58.395, 57.12, 57.375], bgr_to_rgb=True,
                                   test_cfg=dict(size_divisor=16)))
        # ADE20KDataset keeps reduce_zero_label=True: "other" arrives as 255
        test_evaluator = dict(type='dinomamba_mm.BinaryAUC', background_ids=(255, ),
                              ignore_ids=())

    Args:
        backbone (dict | nn.Module): Backbone config (VisionTransformer, LinearViT, DinoVim,
            DinoMambaReg, any backbone whose blocks hold a token mixer) or an already built
            backbone.
        map_type (str): 'similarity' (cosine of the class token output to patch outputs) or
            'attention' (the class token's row of each head's mixing matrix).
            Defaults to 'similarity'.
        layer_indices (Sequence[int]): Blocks to map (negative counts from the end).
            Defaults to (-1, ).
        query (str): 'mean' or 'each' over several read tokens (registers).
            Defaults to 'mean'.
        mamba_kinds (Sequence[str]): The matrices mapped of a mixer that gives several (the
            Mamba-2 mixer: 'forward', 'backward', 'combined'); a mixer with one matrix maps it.
            Defaults to ('combined', ).
        data_preprocessor (dict, optional): E.g. ``dict(type='SegDataPreProcessor', ...)``.
            Defaults to None.
        init_cfg (dict, optional): mmengine init config. Defaults to None.
    """

    def __init__(self,
                 backbone: Union[dict, nn.Module],
                 map_type: str = 'similarity',
                 layer_indices: Sequence[int] = (-1, ),
                 query: str = 'mean',
                 mamba_kinds: Sequence[str] = ('combined', ),
                 data_preprocessor: Optional[dict] = None,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        check_choice('map_type', map_type, MAP_TYPES)
        self.backbone = backbone if isinstance(backbone, nn.Module) else MODELS.build(backbone)
        self.map_type = map_type
        self.layer_indices = list(layer_indices)
        self.query = query
        self.mamba_kinds = tuple(mamba_kinds)

    def forward(self,
                inputs: torch.Tensor,
                data_samples: Optional[List[BaseDataElement]] = None,
                mode: str = 'predict') -> List[BaseDataElement]:
        """inputs (B, 3, H, W) -> the data samples (new ones if None) with their maps."""
        if mode != 'predict':
            raise ValueError(f"ClassTokenMapModel only predicts maps: mode must be 'predict', "
                             f'got {mode!r}')
        result = extract_class_token_maps(self.backbone, inputs, self.layer_indices,
                                          self.map_type, self.query, self.mamba_kinds)
        if data_samples is None:
            data_samples = [BaseDataElement() for _ in range(inputs.shape[0])]
        stride = _patch_stride(self.backbone, inputs.shape[-2:], result.grid)
        extent = (result.grid[0] * stride[0], result.grid[1] * stride[1])
        for sample, maps in zip(data_samples, result.maps):
            sample.pred_map = maps
            sample.set_metainfo(dict(map_layer_ids=list(result.layer_ids),
                                     map_names=list(result.names), map_extent=extent))
        return data_samples


def _patch_stride(backbone, input_size, grid) -> tuple:
    """Pixel stride of the patch grid: the patch embedding's stride, else input / grid."""
    projection = getattr(getattr(backbone, 'patch_embed', None), 'projection', None)
    stride = getattr(projection, 'stride', None)
    if stride is not None:
        return tuple(int(s) for s in stride)
    return tuple(int(size) // int(cells) for size, cells in zip(input_size, grid))
