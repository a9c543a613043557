# UperNet + FCN auxiliary head on a plain (single-scale) backbone, mmseg scope.
# The backbone gives patch tokens (stride 16) of 4 blocks as NCHW maps; mmseg's Feature2Pyramid
# rescales them x4, x2, x1, x0.5 (strides 4, 8, 16, 32) for UPerHead; the FCN head reads the
# stride-16 level. Default backbone: DinoVim-B with the Dino-Mamba paper's token layout (so the
# paper's checkpoints give their features); per-backbone configs in configs/ade20k/ set the
# width, the blocks read and the DINO teacher checkpoint.
custom_imports = dict(imports=['dinomamba_mm'], allow_failed_imports=False)
norm_cfg = dict(type='SyncBN', requires_grad=True)
embed_dims = 768
data_preprocessor = dict(
    type='SegDataPreProcessor',
    mean=[123.675, 116.28, 103.53],
    std=[58.395, 57.12, 57.375],
    bgr_to_rgb=True,
    pad_val=0,
    seg_pad_val=255,
    size=(512, 512),
    # test images are padded to a multiple of the patch size (and cropped back afterwards)
    test_cfg=dict(size_divisor=16))
model = dict(
    type='EncoderDecoder',
    data_preprocessor=data_preprocessor,
    backbone=dict(
        type='dinomamba_mm.DinoVim',
        arch='base',
        img_size=512,
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
    neck=dict(
        type='Feature2Pyramid',
        embed_dim=embed_dims,
        rescales=[4, 2, 1, 0.5],
        norm_cfg=norm_cfg),
    decode_head=dict(
        type='UPerHead',
        in_channels=[embed_dims] * 4,
        in_index=[0, 1, 2, 3],
        pool_scales=(1, 2, 3, 6),
        channels=512,
        dropout_ratio=0.1,
        num_classes=150,
        norm_cfg=norm_cfg,
        align_corners=False,
        loss_decode=dict(
            type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0)),
    auxiliary_head=dict(
        type='FCNHead',
        in_channels=embed_dims,
        in_index=2,
        channels=256,
        num_convs=1,
        concat_input=False,
        dropout_ratio=0.1,
        num_classes=150,
        norm_cfg=norm_cfg,
        align_corners=False,
        loss_decode=dict(
            type='CrossEntropyLoss', use_sigmoid=False, loss_weight=0.4)),
    train_cfg=dict(),
    test_cfg=dict(mode='slide', crop_size=(512, 512), stride=(341, 341)))
