# Linear probe (DINO's recipe, docs/paper.md sections 3-4) of DinoVim-T (width 256) pretrained with
# our DINO config (configs/dino/dino_dinovim-tiny-...): class tokens of the last 8 blocks.
_base_ = [
    '../../_base_/models/linear-probe_dinovim-base.py',
    '../../_base_/datasets/imagenet_linear-probe_bs128.py',
    '../../_base_/schedules/sgd_coslr_100e_linear-probe.py',
]

embed_dims = 256

model = dict(
    backbone=dict(
        checkpoint='work_dirs/dino_dinovim-tiny-p16_8xb64-amp-coslr-100e_in1k/epoch_100.pth',
        backbone=dict(arch='tiny')),
    head=dict(in_channels=8 * embed_dims))  # the base's 8 blocks
