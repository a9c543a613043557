# DINO with a DinoVim-B student (docs/paper.md sections 3-4). Other backbones override `backbone`
# (and `neck.in_channels` when their width differs).
# The backbone is the paper's network: token_layout='paper' (Vim: the class token with its position
# embedding first and a second copy without it in the middle; the position embedding resized with
# DINO's scale-factor convention). configs/dino/*-interleaved-* train the cleaner layout instead.
# Checkpoint keys: student `backbone.*` / `neck.*`, EMA teacher `teacher.backbone.*` /
# `teacher.neck.*` (the model to evaluate), `head.center`, `head.teacher_temp`, `momentum`.
model = dict(
    type='dinomamba_mm.DINO',
    num_teacher_crops=2,  # the global crops, first in the multi-crop list
    data_preprocessor=dict(
        type='SelfSupDataPreprocessor',
        mean=[123.675, 116.28, 103.53],
        std=[58.395, 57.12, 57.375],
        to_rgb=True),
    backbone=dict(
        type='dinomamba_mm.DinoVim',
        arch='base',
        img_size=224,
        patch_size=16,
        out_type='cls_token',
        token_layout='paper',
        drop_path_rate=0.1),
    neck=dict(
        type='dinomamba_mm.DINOProjectionHead',
        in_channels=768,
        out_channels=65536,
        hidden_channels=2048,
        bottleneck_channels=256,
        num_layers=3,
        norm_last_layer=True),
    head=dict(
        type='dinomamba_mm.DINOLossHead',
        out_channels=65536,
        student_temp=0.1,
        teacher_temp=0.04,
        center_momentum=0.9))
