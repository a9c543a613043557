# DINO pretraining of ViT-B/16 (softmax attention, mmpretrain's VisionTransformer) on ImageNet-1k.
_base_ = [
    '../_base_/models/dino_dinovim-base.py',
    '../_base_/datasets/imagenet_dino-multicrop_bs64.py',
    '../_base_/schedules/dino_adamw_coslr_100e.py',
]

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmpretrain.VisionTransformer',
        arch='base',
        img_size=224,
        patch_size=16,
        out_type='cls_token',
        drop_path_rate=0.1))
