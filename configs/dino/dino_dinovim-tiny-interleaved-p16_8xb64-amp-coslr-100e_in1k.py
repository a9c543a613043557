# DINO pretraining of DinoVim-T in the cleaner token layout, not the paper's: the class token once, with
# its position embedding, in the middle of the patches; position embedding resized as mmpretrain's
# ViT does. Its teacher needs token_layout='interleaved' in every config that loads it.
_base_ = './dino_dinovim-tiny-p16_8xb64-amp-coslr-100e_in1k.py'

model = dict(backbone=dict(token_layout='interleaved'))
