# Linear probe of LinearViT-B (ViT-B/16 with phi(Q) phi(K)^T attention), with
# the same feature as ViT-B (DINO's recipe for base models: last class token + mean patch token).
_base_ = './vit-b-p16_dino-ours_8xb128-linear-coslr-100e_in1k.py'

model = dict(
    backbone=dict(
        checkpoint='work_dirs/dino_linearvit-base-p16_8xb64-amp-coslr-100e_in1k/epoch_100.pth',
        backbone=dict(type='dinomamba_mm.LinearViT')))
