# Linear probe of a DINO teacher (docs/paper.md sections 3-4), mmpretrain scope: the frozen teacher
# backbone + one linear layer over ImageNet's 1000 classes. Feature: final-normed class token of
# the last 8 blocks, concatenated (the paper code's get_intermediate_layers: norm_f of each block's
# mixer output, DinoVim's out_source='mixer'). Default backbone: DinoVim-B; the configs in
# configs/dino/benchmarks/ set the size, the blocks read and the checkpoint.
# The teacher weights come from `model.backbone.checkpoint`: a DINO checkpoint of ours
# (teacher.backbone.*), a backbone-only one (tools/misc/extract_dino_teacher.py), or the DINO layout
# ('teacher' entry); a config (or --cfg-options model.backbone.checkpoint=<path>) sets it.
# token_layout='paper': the layout of the paper's teachers and of configs/dino/'s paper-named runs.
# A teacher of another layout (configs/dino/*-interleaved-*) is refused, naming both layouts: probe
# it with --cfg-options model.backbone.backbone.token_layout=interleaved (and the img_size the error
# names, e.g. 224 for DinoMamba-Reg, whose paper-layout probes use 112).
num_last_blocks = 8
embed_dims = 768

model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='dinomamba_mm.FrozenBackbone',
        backbone=dict(
            type='dinomamba_mm.DinoVim',
            arch='base',
            img_size=224,
            patch_size=16,
            out_type='cls_token',
            out_source='mixer',
            out_indices=list(range(-num_last_blocks, 0)),
            final_norm=True,
            token_layout='paper',
            drop_path_rate=0.)),
    neck=dict(type='dinomamba_mm.LinearProbeNeck', in_type='cls_token'),
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        in_channels=num_last_blocks * embed_dims,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, 5),
        init_cfg=dict(type='Normal', layer='Linear', std=0.01)))
