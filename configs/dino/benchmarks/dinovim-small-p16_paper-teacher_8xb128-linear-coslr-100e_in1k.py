# Linear probe of the Dino-Mamba paper's released DinoVim-S teacher (Hugging Face Vim/Small).
# The paper's key names are mapped to DinoVim's (checkpoints/paper_format.py) and
# token_layout='paper' reproduces its token order, so the features are the paper's.
_base_ = [
    '../../_base_/models/linear-probe_dinovim-base.py',
    '../../_base_/datasets/imagenet_linear-probe_bs128.py',
    '../../_base_/schedules/sgd_coslr_100e_linear-probe.py',
]

num_last_blocks = 4
embed_dims = 512

model = dict(
    backbone=dict(
        checkpoint='https://huggingface.co/TimingYang/Dino-Mamba/resolve/main/Vim/Small/'
        'checkpoint.pth',
        backbone=dict(arch='small',
                      out_indices=list(range(-num_last_blocks, 0)))),
    head=dict(in_channels=num_last_blocks * embed_dims))

# the paper's eval command for vim_small: --wd 0.001 (its README, eval.sh)
optim_wrapper = dict(optimizer=dict(weight_decay=1e-3))
