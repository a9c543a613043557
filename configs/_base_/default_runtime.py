# Runtime of the mmpretrain-scope configs (DINO pretraining, linear probes, their demos):
# mmpretrain's, plus the dinomamba_mm modules. The only runtime file of this tree: the ADE20K and
# COCO configs run in the mmseg / mmdet scopes, whose visualisers, loggers and hooks come from those
# libraries' own default runtimes (mmseg's and mmdet's `_base_/default_runtime.py`), inherited by
# their schedules. Each schedule sets the checkpoint and logging intervals of its run length.
_base_ = 'mmpretrain::_base_/default_runtime.py'

custom_imports = dict(imports=['dinomamba_mm'], allow_failed_imports=False)

# every checkpoint saved records the token layout of its DinoVim backbones; loading checks it
default_hooks = dict(backbone_layout=dict(type='dinomamba_mm.BackboneLayoutHook'))
