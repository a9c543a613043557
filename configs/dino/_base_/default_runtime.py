# Runtime of the DINO pretraining configs: mmpretrain's, plus the dinomamba_mm modules.
_base_ = 'mmpretrain::_base_/default_runtime.py'

custom_imports = dict(imports=['dinomamba_mm'], allow_failed_imports=False)

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=50),
    # mmengine's CheckpointHook, written atomically; unresumable settings refused at start
    checkpoint=dict(type='dinomamba_mm.ResumableCheckpointHook', interval=1, max_keep_ckpts=3,
                    save_last=True))

randomness = dict(seed=0)
