# UperNet on DinoVim-S (DINO teacher of the Dino-Mamba paper, Vim/Small, width 512); otherwise
# the DinoVim-B recipe (see upernet_dinovim-b-...py).
_base_ = './upernet_dinovim-b-p16_dino-teacher_8xb2-amp-160k_ade20k-512x512.py'
checkpoint = 'https://huggingface.co/Timing1/Dino-Mamba/resolve/main/Vim/Small/checkpoint.pth'
model = dict(
    backbone=dict(arch='small', init_cfg=dict(checkpoint=checkpoint)),
    neck=dict(embed_dim=512),
    decode_head=dict(in_channels=[512, 512, 512, 512]),
    auxiliary_head=dict(in_channels=512))
