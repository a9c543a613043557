# The demo's linear probe (tools/demo.py, docs/demo.md): a linear classifier on the class token
# of a frozen backbone's last block (final-normed), extracted once from each 64 px scene of the
# demo set (no augmentation; tools/demo.py writes <features>/train.npz and val.npz with
# dinomamba_mm.datasets.save_precomputed_features; linear-probe_dinovim-demo_synthetic.py is the
# same probe reading the images through the frozen backbone), standardised by mmpretrain's
# ClsBatchNormNeck without affine parameters (a DINO teacher and a random init give features
# of different scales). AdamW: it converges in the iterations the demo affords whatever the
# features' scale; no weight decay, as DINO's probe; top-1 on the 2000 val scenes.
_base_ = 'mmpretrain::_base_/default_runtime.py'

custom_imports = dict(imports=['dinomamba_mm'], allow_failed_imports=False)

features = 'work_dirs/demo/features/dinovim'  # tools/demo.py sets it per model
classes = ('circle', 'cross', 'hexagon', 'ring', 'square', 'star', 'triangle')
embed_dims = 96

model = dict(
    type='ImageClassifier',
    # mmpretrain's, without mean / std: it stacks the features and the labels as they are
    data_preprocessor=dict(type='ClsDataPreprocessor'),
    backbone=dict(type='dinomamba_mm.PrecomputedFeatures'),
    neck=[
        # the class token of the one block read, as the probe feature (several blocks'
        # would be concatenated)
        dict(type='dinomamba_mm.LinearProbeNeck', in_type='cls_token'),
        dict(type='ClsBatchNormNeck', input_features=embed_dims),
    ],
    head=dict(
        type='LinearClsHead',
        num_classes=len(classes),
        in_channels=embed_dims,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, ),
        init_cfg=dict(type='Normal', layer='Linear', std=0.01)))

# no transform but the packer: each scene is packed once, not once per epoch
dataset = dict(type='dinomamba_mm.PrecomputedFeatureDataset', data_root=features,
               metainfo=dict(classes=classes), pipeline=[dict(type='PackInputs')],
               pack_once=True)
train_dataloader = dict(
    batch_size=256,
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'),
    dataset=dict(dataset, ann_file='train.npz'))
val_dataloader = dict(train_dataloader, sampler=dict(type='DefaultSampler', shuffle=False),
                      dataset=dict(dataset, ann_file='val.npz'))
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_evaluator = val_evaluator

max_epochs = 100
optim_wrapper = dict(optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.))
param_scheduler = [
    dict(type='CosineAnnealingLR', T_max=max_epochs, eta_min=0., by_epoch=True, begin=0,
         end=max_epochs)
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=max_epochs)
val_cfg = dict()
test_cfg = dict()
randomness = dict(seed=0)
# a resumed run continues loss by loss: the generators' states travel with the checkpoint
custom_hooks = [dict(type='dinomamba_mm.RandomStateHook')]
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=16),
    checkpoint=dict(type='dinomamba_mm.ResumableCheckpointHook', interval=max_epochs,
                    max_keep_ckpts=1, save_last=True))
