# Cascade Mask R-CNN on LinearViT-B/16 (phi(Q) phi(K)^T attention) initialised from the teacher of
# our DINO run (dino-ours, configs/dino/dino_linearvit-base-...): the ViT-B recipe (blocks 4, 6, 8,
# 12, layer-wise lr decay 0.7) with the attention swapped. Paper: 37.1 box AP / 32.6 mask AP.
_base_ = './cascade-mask-rcnn_vit-base-p16_dino-ours_16xb4-amp-lsj-100e_coco.py'
checkpoint = 'work_dirs/dino_linearvit-base-p16_8xb64-amp-coslr-100e_in1k/epoch_100.pth'
model = dict(
    backbone=dict(type='dinomamba_mm.LinearViT', init_cfg=dict(checkpoint=checkpoint)))
