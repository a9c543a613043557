# DINO pretraining of DinoMamba-Reg-B (DinoVim-B with 12 register tokens; feature = their mean),
# the paper's MambaR: a 7x7 position-embedding table (its img_size=[112]) resampled to each crop's
# grid (14x14 global, 6x6 local) every forward, DINO's convention (token_layout='paper').
_base_ = [
    '../_base_/models/dino_dinovim-base.py',
    '../_base_/datasets/imagenet_dino-multicrop_bs64.py',
    '../_base_/schedules/dino_adamw_coslr_100e.py',
]

# teacher in train mode (its drop path on), as the paper's main_dino_vim.py trains it
model = dict(backbone=dict(type='dinomamba_mm.DinoMambaReg', num_registers=12, img_size=112),
             teacher_mode='train')
