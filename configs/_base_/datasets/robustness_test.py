# Test loading shared by the robustness test sets (the linear-probe test transform: short side
# 256 bicubic, centre crop 224). Each set's file names its dataset and evaluator.
robustness_test_pipeline = [
    dict(type='dinomamba_mm.LoadImageFromFile'),
    dict(type='ResizeEdge', scale=256, edge='short', backend='pillow',
         interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=224),
    dict(type='PackInputs'),
]
robustness_test_dataloader = dict(
    _delete_=True,
    batch_size=128,
    num_workers=8,
    dataset=dict(type='CustomDataset', pipeline=robustness_test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False))
