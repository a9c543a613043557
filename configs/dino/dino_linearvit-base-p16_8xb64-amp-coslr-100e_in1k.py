# DINO pretraining of LinearViT-B (ViT-B/16 with phi(Q) phi(K)^T attention) on ImageNet-1k.
_base_ = [
    '../_base_/models/dino_dinovim-base.py',
    './_base_/imagenet_dino-multicrop_bs64.py',
    '../_base_/schedules/dino_adamw_coslr_100e.py',
    './_base_/default_runtime.py',
]

model = dict(
    backbone=dict(
        _delete_=True,
        type='dinomamba_mm.LinearViT',
        arch='base',
        img_size=224,
        patch_size=16,
        out_type='cls_token',
        drop_path_rate=0.1))
