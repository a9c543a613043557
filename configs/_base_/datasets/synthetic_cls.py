# Synthetic shapes, classification layout (mmpretrain scope): one dominant shape per image.
# Generate it with `python tools/data/make_synthetic.py --out data/synthetic`; the class list
# below is the generator's default `--classes` (labels follow this order, see meta/*.txt).
dataset_type = 'ImageNet'
data_root = 'data/synthetic/cls'
classes = ('circle', 'cross', 'hexagon', 'ring', 'square', 'star', 'triangle')
data_preprocessor = dict(
    num_classes=len(classes),
    mean=[123.675, 116.28, 103.53],
    std=[58.395, 57.12, 57.375],
    to_rgb=True)

train_pipeline = [
    dict(type='dinomamba_mm.LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=224, crop_ratio_range=(0.5, 1.0)),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='dinomamba_mm.LoadImageFromFile'),
    dict(type='ResizeEdge', scale=224, edge='short'),
    dict(type='CenterCrop', crop_size=224),
    dict(type='PackInputs'),
]

train_dataloader = dict(
    batch_size=32,
    num_workers=2,
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        split='train',
        metainfo=dict(classes=classes),
        pipeline=train_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=True))
val_dataloader = dict(
    batch_size=32,
    num_workers=2,
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        split='val',
        metainfo=dict(classes=classes),
        pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False))
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_dataloader = val_dataloader
test_evaluator = val_evaluator
