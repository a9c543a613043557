# Linear probe of the Dino-Mamba paper's released DinoMamba-Reg-B ("MambaR") teacher (Hugging Face
# Mambar/Base), with the paper's network: its 7x7 position-embedding table kept (img_size=112) and
# resampled once per forward to the input's grid with DINO's convention (token_layout='paper'), so
# the features are the paper's; key names are mapped by checkpoints/paper_format.py.
_base_ = [
    '../../_base_/models/linear-probe_dinovim-base.py',
    '../../_base_/datasets/imagenet_linear-probe_bs128.py',
    '../../_base_/schedules/sgd_coslr_100e_linear-probe.py',
]

model = dict(
    backbone=dict(
        checkpoint='https://huggingface.co/TimingYang/Dino-Mamba/resolve/main/Mambar/Base/'
        'checkpoint.pth',
        backbone=dict(type='dinomamba_mm.DinoMambaReg', num_registers=12, img_size=112)))

# the paper's eval command for mambar_base: --wd 0.01 (its README, eval.sh)
optim_wrapper = dict(optimizer=dict(weight_decay=1e-2))
