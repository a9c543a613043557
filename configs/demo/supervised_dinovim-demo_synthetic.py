# The demo's supervised DinoVim (tools/demo.py, docs/demo.md): the DinoVim of
# dino_dinovim-demo_synthetic.py trained WITH the labels on the same 4000 images, the same
# optimiser, schedule, batch and augmentation (one view of DINO's global crop per image), a
# linear classifier on the last block's class token: the paper's supervised counterpart of a
# DINO model, for the probe and the class-token maps.
_base_ = './dino_dinovim-demo_synthetic.py'

model = dict(
    _delete_=True,
    type='ImageClassifier',
    data_preprocessor=dict(_base_.model.data_preprocessor, type='ClsDataPreprocessor',
                           num_classes=len(_base_.classes)),
    backbone=_base_.model.backbone,
    head=dict(
        type='LinearClsHead',
        num_classes=len(_base_.classes),
        in_channels=_base_.embed_dims,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, )))

# one global crop of DINOMultiCrop (which returns a list of crops), its transforms with the DINO
# config's values (no blur there)
augmentation = _base_.view_augmentation
train_pipeline = [
    dict(type='dinomamba_mm.LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=_base_.image_size,
         crop_ratio_range=augmentation['global_crop_scale'], interpolation='bicubic',
         backend='pillow'),
    dict(type='RandomFlip', prob=augmentation['flip_prob'], direction='horizontal'),
    # mmpretrain's ColorJitter with a hue step that works on numpy 2 (the same draws), as in
    # DINOMultiCrop: mmcv's adjust_hue raises OverflowError for a negative hue there
    dict(type='RandomApply',
         transforms=[dict(type='dinomamba_mm.HueSafeColorJitter', **augmentation['color_jitter'])],
         prob=augmentation['color_jitter_prob']),
    dict(type='RandomGrayscale', prob=augmentation['grayscale_prob'], keep_channels=True,
         channel_weights=(0.114, 0.587, 0.299)),
    dict(type='PackInputs'),
]
train_dataloader = dict(collate_fn=dict(type='pseudo_collate'),
                        dataset=dict(pipeline=train_pipeline))

custom_hooks = [
    dict(type='dinomamba_mm.PerParameterGradClipHook', max_norm=3.0),
    dict(type='dinomamba_mm.RandomStateHook'),
    dict(type='dinomamba_mm.NonFiniteStepHook', max_consecutive_skips=5),
]
