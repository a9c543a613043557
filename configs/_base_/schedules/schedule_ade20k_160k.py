# ADE20K UperNet schedule for plain backbones (BEiT / MAE / Vim recipe), mmseg scope:
# 160k iterations at 16 images per step (8 GPUs x 2), AdamW lr 1e-4, weight decay 0.05 (none on
# 1-D parameters, position embedding, class / register tokens), layer-wise lr decay 0.92 per
# block (Vim's value for the 24-block DinoVim; the 12-block ViT configs set their own), 1500
# linear warm-up iterations then poly decay (power 1) to 0, bf16 autocast. Built on mmseg's
# default runtime (scope mmseg), with iteration-based hooks.
_base_ = 'mmseg::_base_/default_runtime.py'
optim_wrapper = dict(
    type='AmpOptimWrapper',
    dtype='bfloat16',
    optimizer=dict(
        type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.05),
    constructor='dinomamba_mm.LayerDecayOptimWrapperConstructor',
    paramwise_cfg=dict(
        layer_decay_rate=0.92,
        flat_decay_mult=0.0,
        custom_keys={
            '.pos_embed': dict(decay_mult=0.0),
            '.cls_token': dict(decay_mult=0.0),
            '.register_tokens': dict(decay_mult=0.0),
        }))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=160000,
         by_epoch=False),
]
train_cfg = dict(type='IterBasedTrainLoop', max_iters=160000, val_interval=16000)
# A resumed run continues as the uninterrupted one (same number of processes): a fixed seed (the
# sampler is seeded before the checkpoint is read) and the generators' states in every checkpoint
# (dropout, drop path, main-process draws; validation leaves them as it found them)
randomness = dict(seed=0)
custom_hooks = [dict(type='dinomamba_mm.RandomStateHook')]
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
default_hooks = dict(
    # every checkpoint saved records the token layout of its DinoVim backbone; loading checks it
    backbone_layout=dict(type='dinomamba_mm.BackboneLayoutHook'),
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval=50, log_metric_by_epoch=False),
    param_scheduler=dict(type='ParamSchedulerHook'),
    checkpoint=dict(type='dinomamba_mm.ResumableCheckpointHook', by_epoch=False,
                    interval=16000, max_keep_ckpts=3, save_best='mIoU'),
    sampler_seed=dict(type='DistSamplerSeedHook'),
    visualization=dict(type='SegVisualizationHook'))
# the learning rate above is for 16 images per step
auto_scale_lr = dict(enable=False, base_batch_size=16)

# DDP without device ids: the module's own device is used, which is right both for one GPU per
# process and for CPU processes (tools/dist_train.sh with gloo on a machine without CUDA, where
# mmengine's default device_ids=[LOCAL_RANK] fails). The other two values are mmengine's
# defaults; with model_wrapper_cfg set, mmengine ignores a top-level find_unused_parameters.
model_wrapper_cfg = dict(type='MMDistributedDataParallel', device_ids=None,
                         broadcast_buffers=False, find_unused_parameters=False)

# A collective operation (DDP's gradient all-reduce, ...) waits at most this many seconds for every
# process, then fails saying a process stopped answering (gloo's own default: 30 min). Raise it
# when one rank is legitimately slower for longer, e.g. evaluating or saving alone.
env_cfg = dict(dist_cfg=dict(timeout=600))
