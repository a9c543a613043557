# DINO's optimisation recipe (docs/paper.md section 4), 100 epochs.
# lr 5e-4 for a total batch of 256, scaled linearly to the real total batch by `auto_scale_lr`
# (enabled here: the recipe always scales); linear warm-up from 0 (start_factor 1e-9) over 10
# epochs, then cosine to 1e-6, both per iteration: DINO's schedule value for value.
# Weight decay 0.04 -> 0.4 (cosine per iteration) on weights only: biases and all 1-D
# parameters (norms, A_log, D, dt_bias) get none. Each parameter's gradient clipped to a norm
# of 3.0 on its own, as DINO does (PerParameterGradClipHook below; mmengine's clip_grad would
# clip the norm of all gradients together). bf16 autocast.
# The EMA teacher has requires_grad=False, so the optimizer constructor (with a
# paramwise_cfg) leaves it out.
# Built on mmpretrain's default runtime (scope mmpretrain) with the dinomamba_mm modules: a
# checkpoint every epoch (the 3 newest kept, each recording its backbones' token layout), a log
# line every 50 iterations, seed 0.
_base_ = 'mmpretrain::_base_/default_runtime.py'

custom_imports = dict(imports=['dinomamba_mm'], allow_failed_imports=False)

# DDP without device ids: the module's own device is used, which is right both for one GPU per
# process and for CPU processes (tools/dist_train.sh with gloo on a machine without CUDA, where
# mmengine's default device_ids=[LOCAL_RANK] fails). The other two values are mmengine's
# defaults; with model_wrapper_cfg set, mmengine ignores a top-level find_unused_parameters.
model_wrapper_cfg = dict(type='MMDistributedDataParallel', device_ids=None,
                         broadcast_buffers=False, find_unused_parameters=False)

default_hooks = dict(
    # every checkpoint saved records the token layout of its DinoVim backbones; loading checks it
    backbone_layout=dict(type='dinomamba_mm.BackboneLayoutHook'),
    logger=dict(type='LoggerHook', interval=50),
    # mmengine's CheckpointHook, written atomically; unresumable settings refused at start
    checkpoint=dict(type='dinomamba_mm.ResumableCheckpointHook', interval=1, max_keep_ckpts=3,
                    save_last=True))

randomness = dict(seed=0)

optim_wrapper = dict(
    type='AmpOptimWrapper',
    # mmengine's constructor, minus its warning per frozen teacher parameter
    constructor='dinomamba_mm.TrainableOptimWrapperConstructor',
    dtype='bfloat16',
    optimizer=dict(type='AdamW', lr=5e-4, betas=(0.9, 0.999), weight_decay=0.04),
    paramwise_cfg=dict(bias_decay_mult=0., flat_decay_mult=0.))

warmup_epochs = 10
max_epochs = 100
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-9, end_factor=1.0, by_epoch=True, begin=0,
         end=warmup_epochs, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', T_max=max_epochs - warmup_epochs, eta_min=1e-6,
         by_epoch=True, begin=warmup_epochs, end=max_epochs, convert_to_iter_based=True),
    # weight decay from the optimizer's 0.04 to 0.4 (eta_min_ratio = 0.4 / 0.04 of each param
    # group's own value, so the groups without decay stay at 0), cosine per iteration
    dict(type='CosineAnnealingParamScheduler', param_name='weight_decay', eta_min_ratio=10.0,
         T_max=max_epochs, by_epoch=True, begin=0, end=max_epochs, convert_to_iter_based=True),
]
auto_scale_lr = dict(base_batch_size=256, enable=True)

train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=max_epochs)

# What mmengine lacks (dinomamba_mm/engine/hooks; the last two: engine/safeguards).
custom_hooks = [
    # teacher <- m teacher + (1 - m) student after every step, m cosine 0.996 -> 1
    dict(type='dinomamba_mm.DINOTeacherEMAHook', base_momentum=0.996, final_momentum=1.0),
    # the paper keeps the teacher temperature at 0.04 (DINO's default: 0.04 -> 0.07 over 30)
    dict(type='dinomamba_mm.DINOTeacherTempHook', warmup_teacher_temp=0.04,
         teacher_temp=0.04, warmup_epochs=0),
    # no update of the projection head's last layer during the first epoch
    dict(type='dinomamba_mm.FreezeLastLayerHook', freeze_epochs=1,
         module_name='neck.last_layer'),
    # each parameter's gradient norm clipped to 3.0 before the update
    dict(type='dinomamba_mm.PerParameterGradClipHook', max_norm=3.0),
    # generator states in the checkpoints, so that --resume continues exactly (drop path,
    # the workers' seeds)
    dict(type='dinomamba_mm.RandomStateHook'),
    # a step with a NaN / inf loss or gradient is skipped; 6 in a row (or weights made
    # non-finite) stop the run with an error naming the iteration
    dict(type='dinomamba_mm.NonFiniteStepHook', max_consecutive_skips=5),
]

# A collective operation (DDP's gradient all-reduce, ...) waits at most this many seconds for every
# process, then fails saying a process stopped answering (gloo's own default: 30 min). Raise it
# when one rank is legitimately slower for longer, e.g. evaluating or saving alone.
env_cfg = dict(dist_cfg=dict(timeout=600))
