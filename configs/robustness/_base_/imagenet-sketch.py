# ImageNet-Sketch test set (Wang et al.): 50889 sketches of all 1000 ImageNet classes, one folder
# per wnid (data/imagenet-sketch/sketch/n01440764/*.JPEG). The sorted folders are the ImageNet
# class order, so the plain 1000-way accuracy applies.
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
    dataset=dict(type='CustomDataset', data_root='data/imagenet-sketch/sketch',
                 pipeline=robustness_test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False))
robustness_test_evaluator = dict(_delete_=True, type='Accuracy', topk=(1, 5))
