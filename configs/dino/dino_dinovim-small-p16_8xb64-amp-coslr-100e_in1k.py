# DINO pretraining of DinoVim-S (512 wide, 24 blocks) on ImageNet-1k.
_base_ = [
    '../_base_/models/dino_dinovim-base.py',
    '../_base_/datasets/imagenet_dino-multicrop_bs64.py',
    '../_base_/schedules/dino_adamw_coslr_100e.py',
]

# teacher in train mode (its drop path on), as the paper's main_dino_vim.py trains it
model = dict(backbone=dict(arch='small'), neck=dict(in_channels=512), teacher_mode='train')
