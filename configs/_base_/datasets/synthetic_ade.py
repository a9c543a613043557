# Synthetic shapes, ADE20K layout (mmseg scope). Generate it with
# `python tools/data/make_synthetic.py --out data/synthetic`.
# Label maps hold 0 = background and k = k-th class; as for ADE20K, reduce_zero_label=True
# ignores background (255) and maps the shapes to 0..K-1, so mIoU is over the shapes only.
# mmseg's ADE20KDataset refuses class lists that are not a subset of ADE20K's, hence
# BaseSegDataset with ADE20K's suffixes and folders.
dataset_type = 'BaseSegDataset'
data_root = 'data/synthetic/ade'
classes = ('circle', 'cross', 'hexagon', 'ring', 'square', 'star', 'triangle')
palette = [[220, 20, 60], [0, 128, 255], [255, 160, 0], [0, 170, 80],
           [150, 60, 200], [250, 230, 30], [120, 120, 120]]
crop_size = (256, 256)
metainfo = dict(classes=classes, palette=palette)
dataset_kwargs = dict(
    type=dataset_type,
    data_root=data_root,
    metainfo=metainfo,
    img_suffix='.jpg',
    seg_map_suffix='.png',
    reduce_zero_label=True)

train_pipeline = [
    dict(type='dinomamba_mm.LoadImageFromFile'),
    # reduce_zero_label comes from the dataset; ids are checked against the classes
    dict(type='dinomamba_mm.LoadSegAnnotations', num_classes=len(classes)),
    dict(type='RandomResize', scale=(1024, 256), ratio_range=(0.5, 2.0),
         keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='dinomamba_mm.LoadImageFromFile'),
    dict(type='Resize', scale=(1024, 256), keep_ratio=True),
    # reduce_zero_label comes from the dataset (tools/analysis/binary_auc.py switches it off)
    dict(type='dinomamba_mm.LoadSegAnnotations'),
    dict(type='PackSegInputs'),
]

train_dataloader = dict(
    batch_size=4,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(
        **dataset_kwargs,
        data_prefix=dict(
            img_path='images/training', seg_map_path='annotations/training'),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        **dataset_kwargs,
        data_prefix=dict(
            img_path='images/validation',
            seg_map_path='annotations/validation'),
        pipeline=test_pipeline))
test_dataloader = val_dataloader

val_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU'])
test_evaluator = val_evaluator
