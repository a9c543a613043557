# The demo's DINO pretraining (tools/demo.py, docs/demo.md): a small DinoVim on the demo's
# synthetic scenes (classification layout, labels unused), at the resolution it is probed,
# mapped and segmented at: 64 px scenes, 8 px patches, 8 x 8 = 64 patches + the class token.
# The recipe is the paper's DINO (configs/dino, docs/paper.md section 4) at demo scale: an 8-block
# 96-wide DinoVim (N = 16, matching the attention models' D_QK = 16; twice the blocks of the
# 4-block ViT / LinearViT, as the paper's 24-block DinoVim-B against the 12-block ViT-B, for
# about the same parameters), a 256-way projection head, fp32, on the demo set's 4000 images
# (tools/demo.py generates it).
# What differs from the paper's recipe, and why (docs/demo.md, the design):
# - two global crops and no local crops: a local crop of this scale is 2-4 patches across;
# - no blur and no solarisation: the class patterns are 2-4 px wide and a blur erases them;
# - teacher momentum 0.99 -> 0.9995, weight decay held at 0.04, lr 5e-4 at batch 32, 1 warm-up
#   epoch (a short schedule).
_base_ = [
    '../_base_/models/dino_dinovim-base.py',
    '../_base_/schedules/dino_adamw_coslr_100e.py',
]

data_root = 'data/synthetic_demo/cls'
classes = ('circle', 'cross', 'hexagon', 'ring', 'square', 'star', 'triangle')

embed_dims = 96
image_size = 64
model = dict(
    backbone=dict(
        # chunk_size 128: the 65 tokens in one chunk of the SSD scan (the result does not depend
        # on it; two chunks of 33 and 32 tokens took 1.3x the time)
        arch=dict(_delete_=True, embed_dims=embed_dims, num_layers=8, headdim=32,
                  d_state=16, chunk_size=128),
        img_size=image_size,
        patch_size=8,
        token_layout='interleaved',
        drop_path_rate=0.),
    neck=dict(in_channels=embed_dims, out_channels=256, hidden_channels=512,
              bottleneck_channels=128),
    head=dict(out_channels=256))

#: one view's augmentation (the supervised config applies it once per image)
view_augmentation = dict(
    global_crop_scale=(0.4, 1.0),
    flip_prob=0.5,
    color_jitter=dict(brightness=0.3, contrast=0.3, saturation=0.4, hue=0.25),
    color_jitter_prob=0.8,
    grayscale_prob=0.2,
    global_blur_probs=(0.0, 0.0),
    solarize_prob=0.0)
train_pipeline = [
    dict(type='dinomamba_mm.LoadImageFromFile'),
    dict(type='dinomamba_mm.DINOMultiCrop', num_global_crops=2, num_local_crops=0,
         global_crop_size=image_size, **view_augmentation),
    dict(type='PackInputs'),
]
train_dataloader = dict(
    batch_size=32,
    num_workers=2,
    # as the ImageNet configs: workers restarted each epoch and seeded from the main generator
    # (checkpointed by RandomStateHook), so that --resume continues exactly
    persistent_workers=False,
    worker_init_fn=dict(type='dinomamba_mm.seed_worker_from_loader'),
    drop_last=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'),
    dataset=dict(type='ImageNet', data_root=data_root, split='train',
                 metainfo=dict(classes=classes), pipeline=train_pipeline))

# fp32 on CPU; lr set for batch 32 directly (no linear scaling in the demo)
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    constructor='dinomamba_mm.TrainableOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=5e-4, betas=(0.9, 0.999),
                   weight_decay=0.04),
    paramwise_cfg=dict(bias_decay_mult=0., flat_decay_mult=0.))
auto_scale_lr = dict(enable=False)

warmup_epochs = 1
max_epochs = 40
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, end_factor=1.0, by_epoch=True,
         begin=0, end=warmup_epochs, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', T_max=max_epochs - warmup_epochs,
         eta_min=1e-6, by_epoch=True, begin=warmup_epochs, end=max_epochs,
         convert_to_iter_based=True),
]
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=max_epochs)
custom_hooks = [
    dict(type='dinomamba_mm.DINOTeacherEMAHook', base_momentum=0.99,
         final_momentum=0.9995),
    dict(type='dinomamba_mm.DINOTeacherTempHook', warmup_teacher_temp=0.04,
         teacher_temp=0.04, warmup_epochs=0),
    dict(type='dinomamba_mm.FreezeLastLayerHook', freeze_epochs=1,
         module_name='neck.last_layer'),
    dict(type='dinomamba_mm.PerParameterGradClipHook', max_norm=3.0),
    dict(type='dinomamba_mm.RandomStateHook'),
    dict(type='dinomamba_mm.NonFiniteStepHook', max_consecutive_skips=5),
]

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=25),
    checkpoint=dict(type='dinomamba_mm.ResumableCheckpointHook', interval=1,
                    max_keep_ckpts=1, save_last=True))
