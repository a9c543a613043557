# Linear probe of DINO-pretrained DinoVim-T on ImageNet-1k (docs/paper.md sections 3-4).
# Frozen teacher backbone; feature = final-normed class token of the last 8 blocks, concatenated
# (the paper code's get_intermediate_layers: norm_f of each block's mixer output, DinoVim's
# out_source='mixer'); one linear layer on top.
# The teacher weights come from a DINO checkpoint of ours (teacher.backbone.*), a backbone-only
# one (tools/misc/extract_dino_teacher.py), or the DINO layout ('teacher' entry); set it with
#   --cfg-options model.backbone.checkpoint=<path>
_base_ = [
    './_base_/imagenet_linear-probe_bs128.py',
    './_base_/sgd_coslr_100e_linear-probe.py',
    './_base_/default_runtime.py',
]

num_last_blocks = 8
embed_dims = 256

model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='dinomamba_mm.FrozenBackbone',
        checkpoint='work_dirs/dino_dinovim-tiny-p16_8xb64-amp-coslr-100e_in1k/epoch_100.pth',
        backbone=dict(
            type='dinomamba_mm.DinoVim',
            arch='tiny',
            img_size=224,
            patch_size=16,
            out_type='cls_token',
            out_source='mixer',
            out_indices=list(range(-num_last_blocks, 0)),
            final_norm=True,
            drop_path_rate=0.)),
    neck=dict(type='dinomamba_mm.LinearProbeNeck', in_type='cls_token'),
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        in_channels=num_last_blocks * embed_dims,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, 5),
        init_cfg=dict(type='Normal', layer='Linear', std=0.01)))
