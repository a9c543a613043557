# ADE20K (mmseg scope), data/ade/ADEChallengeData2016: 512x512 crops of images resized to
# (2048, 512) x [0.5, 2.0], reduce_zero_label=True (150 classes, "other" ignored).
# 2 images per GPU (8 GPUs -> the 16 per step of schedule_ade20k_160k.py).
# mmseg's pipelines, with loaders that name a broken image or label map (undecodable, an RGB
# map, another size than its image, ids beyond the 150 classes) instead of failing later.
_base_ = 'mmseg::_base_/datasets/ade20k.py'

crop_size = (512, 512)
train_pipeline = [
    dict(type='dinomamba_mm.LoadImageFromFile'),
    dict(type='dinomamba_mm.LoadSegAnnotations', reduce_zero_label=True, num_classes=150),
    dict(type='RandomResize', scale=(2048, 512), ratio_range=(0.5, 2.0), keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='dinomamba_mm.LoadImageFromFile'),
    dict(type='Resize', scale=(2048, 512), keep_ratio=True),
    dict(type='dinomamba_mm.LoadSegAnnotations', reduce_zero_label=True, num_classes=150),
    dict(type='PackSegInputs'),
]
train_dataloader = dict(batch_size=2, dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
