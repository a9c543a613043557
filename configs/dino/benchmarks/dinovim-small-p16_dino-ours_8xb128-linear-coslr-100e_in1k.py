# Linear probe of DinoVim-S (width 512) pretrained with our DINO config
# (configs/dino/dino_dinovim-small-...): class tokens of the last 4 blocks (paper: n = 4 for S).
_base_ = [
    '../../_base_/models/linear-probe_dinovim-base.py',
    '../../_base_/datasets/imagenet_linear-probe_bs128.py',
    '../../_base_/schedules/sgd_coslr_100e_linear-probe.py',
]

num_last_blocks = 4
embed_dims = 512

model = dict(
    backbone=dict(
        checkpoint='work_dirs/dino_dinovim-small-p16_8xb64-amp-coslr-100e_in1k/epoch_100.pth',
        backbone=dict(arch='small',
                      out_indices=list(range(-num_last_blocks, 0)))),
    head=dict(in_channels=num_last_blocks * embed_dims))

# the paper's eval command for vim_small: --wd 0.001 (its README, eval.sh)
optim_wrapper = dict(optimizer=dict(weight_decay=1e-3))
