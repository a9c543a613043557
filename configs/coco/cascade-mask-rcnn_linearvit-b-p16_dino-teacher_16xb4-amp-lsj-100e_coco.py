# Cascade Mask R-CNN on LinearViT-B/16 (phi(Q) phi(K)^T attention) pretrained with our DINO
# recipe (configs/dino/dino_linearvit-base-...): blocks 4, 6, 8, 12, layer-wise lr decay 0.7 over
# the 12 blocks (ViTDet's value for ViT-B); otherwise the DinoVim-B recipe.
# Paper: 37.1 box AP / 32.6 mask AP.
# The teacher backbone (keys teacher.backbone.*) is loaded by mmengine's Pretrained initializer,
# which runs after the ViT's own init_weights (see configs/ade20k/upernet_vit-b-...py).
_base_ = './cascade-mask-rcnn_dinovim-b-p16_dino-teacher_16xb4-amp-lsj-100e_coco.py'
checkpoint = 'work_dirs/dino_linearvit-base-p16_8xb64-amp-coslr-100e_in1k/epoch_100.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='dinomamba_mm.LinearViT',
        arch='base',
        img_size=(1024, 1024),
        patch_size=16,
        out_type='featmap',
        out_indices=(3, 5, 7, 11),
        final_norm=True,
        drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint,
                      prefix='teacher.backbone.')))
optim_wrapper = dict(paramwise_cfg=dict(layer_decay_rate=0.7))
