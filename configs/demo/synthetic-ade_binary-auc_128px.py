# Binary-AUC data of the demo (tools/demo.py): the synthetic ADE-style val images at 48 px,
# 1.5 x the demo models' 32 px input (their position embedding is interpolated), so that the map
# is 6 x 6 patches rather than 4 x 4; labels kept at full size (the maps are upsampled to them).
_base_ = '../_base_/datasets/synthetic_ade.py'

image_size = 48
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(image_size, image_size), keep_ratio=True),
    dict(type='LoadAnnotations'),
    dict(type='PackSegInputs'),
]
test_dataloader = dict(dataset=dict(pipeline=test_pipeline))
