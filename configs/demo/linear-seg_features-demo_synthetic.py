# The demo's dense miniature (tools/demo.py, docs/demo.md): a linear segmentation head (a 1 x 1
# convolution: a linear classifier per patch, logits resized bilinearly to the 64 px label
# map) in mmseg's EncoderDecoder, on the patch tokens of a frozen backbone's last
# block (final-normed, 8 x 8 x 96), extracted once from each scene of the demo set
# (tools/demo.py writes <features>/train.npz and val.npz). 8 classes: background and the 7
# shapes; mIoU over the 8 on the 2000 val scenes. Why linear and why frozen: docs/demo.md.
_base_ = 'mmseg::_base_/default_runtime.py'

custom_imports = dict(imports=['dinomamba_mm'], allow_failed_imports=False)

features = 'work_dirs/demo/features/dinovim'  # tools/demo.py sets it per model
classes = ('background', 'circle', 'cross', 'hexagon', 'ring', 'square', 'star', 'triangle')
embed_dims = 96

model = dict(
    type='EncoderDecoder',
    data_preprocessor=dict(type='mmengine.BaseDataPreprocessor'),
    backbone=dict(type='dinomamba_mm.PrecomputedFeatures'),
    # mmseg's FCNHead with num_convs=0 computes the same logits and loss, and also a pixel
    # accuracy of every training batch for the log, a large part of this head's training
    decode_head=dict(
        type='dinomamba_mm.LinearSegHead',
        in_channels=embed_dims,
        num_classes=len(classes),
        align_corners=False),
    train_cfg=dict(),
    test_cfg=dict(mode='whole'))

# no transform but the packer: each scene is packed once, not once per epoch
dataset = dict(type='dinomamba_mm.PrecomputedFeatureDataset', data_root=features,
               metainfo=dict(classes=classes), pipeline=[dict(type='PackSegInputs')],
               pack_once=True)
train_dataloader = dict(
    batch_size=64,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'),
    dataset=dict(dataset, ann_file='train.npz'))
val_dataloader = dict(train_dataloader, sampler=dict(type='DefaultSampler', shuffle=False),
                      dataset=dict(dataset, ann_file='val.npz'))
test_dataloader = val_dataloader
val_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU'])
test_evaluator = val_evaluator

max_epochs = 40
optim_wrapper = dict(type='OptimWrapper',
                     optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.))
param_scheduler = [
    dict(type='CosineAnnealingLR', T_max=max_epochs, eta_min=0., by_epoch=True, begin=0,
         end=max_epochs)
]
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=max_epochs, val_interval=max_epochs)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
randomness = dict(seed=0)
# a resumed run continues loss by loss: the generators' states travel with the checkpoint
custom_hooks = [dict(type='dinomamba_mm.RandomStateHook')]
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=50),
    checkpoint=dict(type='dinomamba_mm.ResumableCheckpointHook', interval=max_epochs,
                    max_keep_ckpts=1, save_last=True),
    visualization=dict(type='SegVisualizationHook', draw=False))
