# Linear probe of DINO-pretrained DinoVim-B: class tokens of the last 8 blocks.
_base_ = './dinovim-t-p16_dino-teacher_8xb128-linear-coslr-100e_in1k.py'

num_last_blocks = 8
embed_dims = 768

model = dict(
    backbone=dict(
        checkpoint='work_dirs/dino_dinovim-base-p16_8xb64-amp-coslr-100e_in1k/epoch_100.pth',
        backbone=dict(arch='base',
                      out_indices=list(range(-num_last_blocks, 0)))),
    head=dict(in_channels=num_last_blocks * embed_dims))
