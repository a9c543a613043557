# Linear probe of DinoVim-B pretrained with our DINO config (configs/dino/dino_dinovim-base-...):
# class tokens of the last 8 blocks.
_base_ = [
    '../../_base_/models/linear-probe_dinovim-base.py',
    '../../_base_/datasets/imagenet_linear-probe_bs128.py',
    '../../_base_/schedules/sgd_coslr_100e_linear-probe.py',
]

model = dict(
    backbone=dict(
        checkpoint='work_dirs/dino_dinovim-base-p16_8xb64-amp-coslr-100e_in1k/epoch_100.pth'))

# the paper's eval command for vim_base: --wd 0.01 (its README, eval.sh)
optim_wrapper = dict(optimizer=dict(weight_decay=1e-2))
