# Linear probe of DINO-pretrained DinoMamba-Reg-B: the mean of the 12 register tokens of each of
# the last 8 blocks, concatenated.
_base_ = './dinovim-t-p16_dino-teacher_8xb128-linear-coslr-100e_in1k.py'

num_last_blocks = 8
embed_dims = 768

model = dict(
    backbone=dict(
        checkpoint='work_dirs/dino_dinomambareg-base-p16_8xb64-amp-coslr-100e_in1k/epoch_100.pth',
        backbone=dict(type='dinomamba_mm.DinoMambaReg', arch='base',
                      num_registers=12,
                      out_indices=list(range(-num_last_blocks, 0)))),
    head=dict(in_channels=num_last_blocks * embed_dims))
