# Runtime of the linear-probe configs: mmpretrain's, plus the dinomamba_mm modules they use.
_base_ = 'mmpretrain::_base_/default_runtime.py'

custom_imports = dict(
    imports=[
        'dinomamba_mm',
        'dinomamba_mm.models.backbones.frozen_backbone',
        'dinomamba_mm.evaluation.metrics.class_subset_accuracy',
        'dinomamba_mm.evaluation.metrics.real_accuracy',
    ],
    allow_failed_imports=False)

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=100),
    checkpoint=dict(type='CheckpointHook', interval=10, max_keep_ckpts=3,
                    save_last=True))
