# Linear probe of the Dino-Mamba paper's released DinoVim-B teacher (Hugging Face Vim/Base).
# The paper's key names are mapped to DinoVim's (checkpoints/paper_format.py) and
# token_layout='paper' reproduces its token order, so the features are the paper's.
_base_ = [
    '../../_base_/models/linear-probe_dinovim-base.py',
    '../../_base_/datasets/imagenet_linear-probe_bs128.py',
    '../../_base_/schedules/sgd_coslr_100e_linear-probe.py',
]

model = dict(
    backbone=dict(
        checkpoint='https://huggingface.co/TimingYang/Dino-Mamba/resolve/main/Vim/Base/'
        'checkpoint.pth'))

# the paper's eval command for vim_base: --wd 0.01 (its README, eval.sh)
optim_wrapper = dict(optimizer=dict(weight_decay=1e-2))
