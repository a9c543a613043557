# DINO pretraining of DinoMamba-Reg-B in the cleaner layout, not the paper's: a 14x14
# position-embedding table (224 px) resized per crop as mmpretrain's ViT does. Its teacher needs
# token_layout='interleaved' and img_size=224 in every config that loads it.
_base_ = './dino_dinomambareg-base-p16_8xb64-amp-coslr-100e_in1k.py'

model = dict(backbone=dict(token_layout='interleaved', img_size=224))
