# Binary-AUC data of the demo (tools/demo.py): the synthetic ADE-style val images at the demo
# models' input size (48 px, the DINO global-crop size), labels kept at full size (the maps are
# upsampled to them).
_base_ = '../_base_/datasets/synthetic_ade.py'

image_size = 48
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(image_size, image_size), keep_ratio=True),
    dict(type='LoadAnnotations'),
    dict(type='PackSegInputs'),
]
test_dataloader = dict(dataset=dict(pipeline=test_pipeline))
