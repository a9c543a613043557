# UperNet on LinearViT-B/16 (ViT-B with phi(Q) phi(K)^T attention) initialised from the teacher of
# our DINO run (dino-ours, configs/dino/dino_linearvit-base-...): the ViT-B recipe (blocks 4, 6, 8,
# 12, layer-wise lr decay 0.65) with the attention swapped. Paper: 29.2 mIoU.
_base_ = './upernet_vit-base-p16_dino-ours_8xb2-amp-160k_ade20k-512x512.py'
checkpoint = 'work_dirs/dino_linearvit-base-p16_8xb64-amp-coslr-100e_in1k/epoch_100.pth'
model = dict(
    backbone=dict(type='dinomamba_mm.LinearViT', init_cfg=dict(checkpoint=checkpoint)))
