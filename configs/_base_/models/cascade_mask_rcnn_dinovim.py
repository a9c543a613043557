# Cascade Mask R-CNN on a plain (single-scale) backbone, mmdet scope: mmdet's Cascade Mask R-CNN
# (3 cascade stages, IoU 0.5 / 0.6 / 0.7, mask head, RPN) with the backbone's patch tokens (stride
# 16) of 4 blocks rescaled x4, x2, x1, x0.5 by mmseg's Feature2Pyramid (strides 4, 8, 16, 32), then
# an FPN (256 channels, 5 levels). Training batches are padded to the
# 1024x1024 LSJ crops. Default backbone: DinoVim-B with the Dino-Mamba paper's token
# layout; per-backbone configs in configs/coco/ set the width, the blocks read and the checkpoint.
_base_ = 'mmdet::_base_/models/cascade-mask-rcnn_r50_fpn.py'
custom_imports = dict(imports=['dinomamba_mm'], allow_failed_imports=False)
norm_cfg = dict(type='SyncBN', requires_grad=True)
embed_dims = 768
model = dict(
    data_preprocessor=dict(
        pad_size_divisor=32,
        batch_augments=[
            dict(type='BatchFixedSizePad', size=(1024, 1024), pad_mask=True)
        ]),
    backbone=dict(
        _delete_=True,
        type='dinomamba_mm.DinoVim',
        arch='base',
        img_size=(1024, 1024),
        patch_size=16,
        out_type='featmap',
        out_indices=(5, 11, 17, 23),
        final_norm=True,
        drop_path_rate=0.1,
        token_layout='paper',
        # the paper's token mixer (any registered mixer fits here); inference at high
        # resolution is memory-bound: no-grad mixers run in 512-token segments (same result,
        # activation peak ~2.4x lower)
        mixer_cfg=dict(type='dinomamba_mm.BidirectionalMamba2Mixer', segment_len=512)),
    neck=[
        dict(
            type='mmseg.Feature2Pyramid',
            embed_dim=embed_dims,
            rescales=[4, 2, 1, 0.5],
            norm_cfg=norm_cfg),
        dict(
            type='FPN',
            in_channels=[embed_dims] * 4,
            out_channels=256,
            num_outs=5),
    ])
