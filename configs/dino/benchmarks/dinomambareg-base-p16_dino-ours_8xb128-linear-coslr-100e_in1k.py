# Linear probe of DinoMamba-Reg-B pretrained with our DINO config
# (configs/dino/dino_dinomambareg-base-...): the mean of the 12 register tokens of each of the last
# 8 blocks, concatenated. The paper's MambaR: a 7x7 position-embedding table (img_size=112)
# resampled once per forward to the input's grid, DINO's convention (token_layout='paper').
_base_ = [
    '../../_base_/models/linear-probe_dinovim-base.py',
    '../../_base_/datasets/imagenet_linear-probe_bs128.py',
    '../../_base_/schedules/sgd_coslr_100e_linear-probe.py',
]

model = dict(
    backbone=dict(
        checkpoint='work_dirs/dino_dinomambareg-base-p16_8xb64-amp-coslr-100e_in1k/epoch_100.pth',
        backbone=dict(type='dinomamba_mm.DinoMambaReg', num_registers=12, img_size=112)))

# the paper's eval command for mambar_base: --wd 0.01 (its README, eval.sh)
optim_wrapper = dict(optimizer=dict(weight_decay=1e-2))
