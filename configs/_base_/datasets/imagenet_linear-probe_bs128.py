# ImageNet-1k for DINO's linear evaluation (docs/paper.md section 4):
# train RandomResizedCrop 224 + horizontal flip; test resize (short side) 256, centre crop 224.
# 128 images per GPU (DINO's eval_linear default; 8 GPUs -> batch 1024).
dataset_type = 'ImageNet'
data_root = 'data/imagenet'

data_preprocessor = dict(
    num_classes=1000,
    mean=[123.675, 116.28, 103.53],
    std=[58.395, 57.12, 57.375],
    to_rgb=True)

train_pipeline = [
    dict(type='dinomamba_mm.LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=224, backend='pillow',
         interpolation='bilinear'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='dinomamba_mm.LoadImageFromFile'),
    dict(type='ResizeEdge', scale=256, edge='short', backend='pillow',
         interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=224),
    dict(type='PackInputs'),
]

train_dataloader = dict(
    batch_size=128,
    num_workers=8,
    # workers restarted each epoch and seeded from the (checkpointed) generators: a resumed run
    # draws the uninterrupted run's crops and flips
    persistent_workers=False,
    worker_init_fn=dict(type='dinomamba_mm.seed_worker_from_loader'),
    dataset=dict(type=dataset_type, data_root=data_root, split='train',
                 pipeline=train_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=True))
val_dataloader = dict(
    batch_size=128,
    num_workers=8,
    persistent_workers=True,
    dataset=dict(type=dataset_type, data_root=data_root, split='val',
                 pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False))
val_evaluator = dict(type='Accuracy', topk=(1, 5))

test_dataloader = val_dataloader
test_evaluator = val_evaluator
