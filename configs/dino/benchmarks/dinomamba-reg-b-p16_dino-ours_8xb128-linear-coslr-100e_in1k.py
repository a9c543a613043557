# Linear probe of DinoMamba-Reg-B pretrained with our DINO config
# (configs/dino/dino_dinomambareg-base-...): the mean of the 12 register tokens of each of the last
# 8 blocks, concatenated.
_base_ = [
    '../../_base_/models/linear-probe_dinovim-base.py',
    '../../_base_/datasets/imagenet_linear-probe_bs128.py',
    '../../_base_/schedules/sgd_coslr_100e_linear-probe.py',
]

model = dict(
    backbone=dict(
        checkpoint='work_dirs/dino_dinomambareg-base-p16_8xb64-amp-coslr-100e_in1k/epoch_100.pth',
        backbone=dict(type='dinomamba_mm.DinoMambaReg', num_registers=12)))
