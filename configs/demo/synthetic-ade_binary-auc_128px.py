# Maps of the demo (tools/demo.py): the synthetic ADE-style val scenes at 128 px, 4 x the demo
# models' 32 px input (their position embedding is interpolated), so that a map has 16 x 16
# tokens (8 px patches) and a shape covers 2-9 of them across, the size it has in the models'
# training crops; labels kept at full size (the maps are upsampled to them).
_base_ = '../_base_/datasets/synthetic_ade.py'

data_root = 'data/synthetic_demo/ade'
image_size = 128
test_pipeline = [
    dict(type='dinomamba_mm.LoadImageFromFile'),
    dict(type='Resize', scale=(image_size, image_size), keep_ratio=True),
    dict(type='dinomamba_mm.LoadSegAnnotations'),
    dict(type='PackSegInputs'),
]
test_dataloader = dict(dataset=dict(data_root=data_root, pipeline=test_pipeline))
