# Linear probe of DINO-pretrained DinoVim-S: class tokens of the last 4 blocks (paper: n = 4 for S).
_base_ = './dinovim-t-p16_dino-teacher_8xb128-linear-coslr-100e_in1k.py'

num_last_blocks = 4
embed_dims = 512

model = dict(
    backbone=dict(
        checkpoint='work_dirs/dino_dinovim-small-p16_8xb64-amp-coslr-100e_in1k/epoch_100.pth',
        backbone=dict(arch='small',
                      out_indices=list(range(-num_last_blocks, 0)))),
    head=dict(in_channels=num_last_blocks * embed_dims))
