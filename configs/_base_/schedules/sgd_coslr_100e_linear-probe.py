# DINO's linear-probe schedule (docs/paper.md section 4): SGD momentum 0.9, lr 1e-3 x batch / 256,
# 100 epochs, cosine to 0 stepped per epoch, no weight decay (eval_linear's default). The paper's
# eval commands set --wd 0.001 for DinoVim-S and 0.01 for DinoVim-B and DinoMamba-Reg-B: their
# probe configs (configs/dino/benchmarks/) set it on every parameter, as eval_linear does.
# lr below is for the total batch 1024 (8 x 128); `tools/train.py --auto-scale-lr` rescales it
# linearly for another total batch.
# Built on mmpretrain's default runtime (scope mmpretrain) with the dinomamba_mm modules: a
# checkpoint every 10 epochs (the 3 newest kept, each recording its backbones' token layout), a
# log line every 100 iterations.
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
    logger=dict(type='LoggerHook', interval=100),
    # mmengine's CheckpointHook, written atomically; unresumable settings refused at start
    checkpoint=dict(type='dinomamba_mm.ResumableCheckpointHook', interval=10,
                    max_keep_ckpts=3, save_last=True))

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='SGD', lr=1e-3 * 1024 / 256, momentum=0.9,
                   weight_decay=0.))
param_scheduler = [
    dict(type='CosineAnnealingLR', T_max=100, eta_min=0., by_epoch=True,
         begin=0, end=100)
]
auto_scale_lr = dict(base_batch_size=1024)

train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=100, val_interval=10)

# A resumed run continues loss by loss (same number of processes): a fixed seed (the sampler and
# the workers' seeds are set before the checkpoint is read) and the generators' states in every
# checkpoint (RandomStateHook; the datasets' workers are re-seeded from them each epoch)
randomness = dict(seed=0)
custom_hooks = [dict(type='dinomamba_mm.RandomStateHook')]
val_cfg = dict()
test_cfg = dict()

# A collective operation (DDP's gradient all-reduce, ...) waits at most this many seconds for every
# process, then fails saying a process stopped answering (gloo's own default: 30 min). Raise it
# when one rank is legitimately slower for longer, e.g. evaluating or saving alone.
env_cfg = dict(dist_cfg=dict(timeout=600))
