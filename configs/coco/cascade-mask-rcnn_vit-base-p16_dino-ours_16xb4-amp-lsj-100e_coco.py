# Cascade Mask R-CNN on ViT-B/16 initialised from the teacher of our DINO run (dino-ours,
# configs/dino/dino_vit-base-p16_8xb64-amp-coslr-100e_in1k.py): blocks 4, 6, 8, 12, layer-wise lr decay 0.7 over the 12 blocks
# (ViTDet's value for ViT-B); otherwise the DinoVim-B recipe. Paper: 44.8 box AP / 39.1 mask AP.
# The teacher backbone (keys teacher.backbone.*) is loaded by the Pretrained initializer of scope
# dinomamba_mm (the checked loader), which runs after the ViT's own init_weights (see
# configs/ade20k/upernet_vit-base-p16_dino-ours_8xb2-amp-160k_ade20k-512x512.py).
_base_ = [
    '../_base_/models/cascade_mask_rcnn_dinovim.py',
    '../_base_/datasets/coco_instance.py',
    '../_base_/schedules/schedule_coco_lsj_100e.py',
]
checkpoint = 'work_dirs/dino_vit-base-p16_8xb64-amp-coslr-100e_in1k/epoch_100.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='mmpretrain.VisionTransformer',
        arch='base',
        img_size=(1024, 1024),
        patch_size=16,
        out_type='featmap',
        out_indices=(3, 5, 7, 11),
        final_norm=True,
        drop_path_rate=0.1,
        # _scope_: mmengine's own Pretrained loads NaN or mismatched weights with a log line
        init_cfg=dict(type='Pretrained', _scope_='dinomamba_mm', checkpoint=checkpoint,
                      prefix='teacher.backbone.')))
optim_wrapper = dict(paramwise_cfg=dict(layer_decay_rate=0.7))
