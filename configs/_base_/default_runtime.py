# Runtime of the mmpretrain-scope configs (DINO pretraining, linear probes, their demos):
# mmpretrain's, plus the dinomamba_mm modules. The only runtime file of this tree: the ADE20K and
# COCO configs run in the mmseg / mmdet scopes, whose visualisers, loggers and hooks come from those
# libraries' own default runtimes (mmseg's and mmdet's `_base_/default_runtime.py`), inherited by
# their schedules. Each schedule sets the checkpoint and logging intervals of its run length.
_base_ = 'mmpretrain::_base_/default_runtime.py'

custom_imports = dict(imports=['dinomamba_mm'], allow_failed_imports=False)

# every checkpoint saved records the token layout of its DinoVim backbones; loading checks it
default_hooks = dict(backbone_layout=dict(type='dinomamba_mm.BackboneLayoutHook'))

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
