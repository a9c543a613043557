# Synthetic shapes, COCO layout (mmdet scope). Generate it with
# `python tools/data/make_synthetic.py --out data/synthetic`. Masks are uncompressed RLE of the
# visible parts (rings have holes), which mmdet reads with LoadAnnotations(poly2mask=True), the
# default; the same LSJ-style pipeline as coco_instance.py, at the synthetic images' 320 px.
dataset_type = 'dinomamba_mm.CocoDataset'
data_root = 'data/synthetic/coco/'
classes = ('circle', 'cross', 'hexagon', 'ring', 'square', 'star', 'triangle')
metainfo = dict(classes=classes)
image_size = (320, 320)
backend_args = None

train_pipeline = [
    dict(type='dinomamba_mm.LoadImageFromFile', backend_args=backend_args),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomResize', scale=image_size, ratio_range=(0.5, 1.5),
         keep_ratio=True),
    dict(type='RandomCrop', crop_type='absolute_range', crop_size=image_size,
         recompute_bbox=True, allow_negative_crop=True),
    dict(type='FilterAnnotations', min_gt_bbox_wh=(1e-2, 1e-2)),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='dinomamba_mm.LoadImageFromFile', backend_args=backend_args),
    dict(type='Resize', scale=image_size, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                    'scale_factor')),
]

train_dataloader = dict(
    batch_size=2,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        metainfo=metainfo,
        ann_file='annotations/instances_train2017.json',
        data_prefix=dict(img='train2017/'),
        filter_cfg=dict(filter_empty_gt=True, min_size=8),
        pipeline=train_pipeline,
        backend_args=backend_args))
val_dataloader = dict(
    batch_size=1,
    num_workers=2,
    persistent_workers=True,
    drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        metainfo=metainfo,
        ann_file='annotations/instances_val2017.json',
        data_prefix=dict(img='val2017/'),
        test_mode=True,
        pipeline=test_pipeline,
        backend_args=backend_args))
test_dataloader = val_dataloader

val_evaluator = dict(
    type='CocoMetric',
    ann_file=data_root + 'annotations/instances_val2017.json',
    metric=['bbox', 'segm'],
    format_only=False,
    backend_args=backend_args)
test_evaluator = val_evaluator
