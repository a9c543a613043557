# ImageNet-ReaL (Beyer et al., "Are we done with ImageNet?"): the ImageNet val images in
# mmpretrain's layout (data/imagenet/val, meta/val.txt) with the reassessed multi-label ground
# truth data/imagenet/real.json (50000 lists in val-file order). Top-1 is correct when the
# prediction is in the image's set; images with an empty set are skipped.
robustness_test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=256, edge='short', backend='pillow',
         interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=224),
    dict(type='PackInputs'),
]
robustness_test_dataloader = dict(
    _delete_=True,
    batch_size=128,
    num_workers=8,
    dataset=dict(type='ImageNet', data_root='data/imagenet', split='val',
                 pipeline=robustness_test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False))
robustness_test_evaluator = dict(
    _delete_=True,
    type='dinomamba_mm.ReaLAccuracy',
    real_json='data/imagenet/real.json')
