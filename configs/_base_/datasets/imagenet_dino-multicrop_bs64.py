# ImageNet-1k train split with DINO's multi-crop augmentation (docs/paper.md section 4):
# 2 global crops 224 (scale 0.4-1) + 8 local crops 96 (scale 0.05-0.4), flip, colour jitter
# (0.4, 0.4, 0.2, 0.1; p 0.8), grayscale p 0.2, Gaussian blur radius U(0.1, 2) with p 1.0 /
# 0.1 / 0.5 (global 1 / global 2 / local), solarisation p 0.2 on global crop 2.
# 64 images per GPU (DINO's default; 8 GPUs -> total batch 512, lr 1e-3 after auto scaling).
dataset_type = 'ImageNet'
data_root = 'data/imagenet'

train_pipeline = [
    dict(type='dinomamba_mm.LoadImageFromFile'),
    dict(
        type='dinomamba_mm.DINOMultiCrop',
        num_global_crops=2,
        num_local_crops=8,
        global_crop_size=224,
        local_crop_size=96,
        global_crop_scale=(0.4, 1.0),
        local_crop_scale=(0.05, 0.4),
        flip_prob=0.5,
        color_jitter=dict(brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1),
        color_jitter_prob=0.8,
        grayscale_prob=0.2,
        blur_radius_range=(0.1, 2.0),
        global_blur_probs=(1.0, 0.1),
        local_blur_prob=0.5,
        solarize_prob=0.2,
        solarize_thr=128),
    dict(type='PackInputs'),
]

train_dataloader = dict(
    batch_size=64,
    num_workers=10,
    # Workers restarted each epoch and seeded from the main process's generator, which
    # RandomStateHook checkpoints: a resumed run draws the uninterrupted run's augmentations.
    persistent_workers=False,
    worker_init_fn=dict(type='dinomamba_mm.seed_worker_from_loader'),
    pin_memory=True,
    drop_last=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'),
    dataset=dict(type=dataset_type, data_root=data_root, split='train',
                 pipeline=train_pipeline))
