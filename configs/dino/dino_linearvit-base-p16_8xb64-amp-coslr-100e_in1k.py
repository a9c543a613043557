# DINO pretraining of LinearViT-B (ViT-B/16 with phi(Q) phi(K)^T attention) on ImageNet-1k: the
# ViT-B recipe with the attention swapped.
_base_ = './dino_vit-base-p16_8xb64-amp-coslr-100e_in1k.py'

model = dict(backbone=dict(type='dinomamba_mm.LinearViT'))
