# Linear probe of the Dino-Mamba paper's released DinoVim-T teacher (Hugging Face Vim/Tiny).
# The paper's key names are mapped to DinoVim's (checkpoints/paper_format.py) and
# token_layout='paper' reproduces its token order, so the features are the paper's.
_base_ = [
    '../../_base_/models/linear-probe_dinovim-base.py',
    '../../_base_/datasets/imagenet_linear-probe_bs128.py',
    '../../_base_/schedules/sgd_coslr_100e_linear-probe.py',
]

embed_dims = 256

model = dict(
    backbone=dict(
        checkpoint='https://huggingface.co/TimingYang/Dino-Mamba/resolve/main/Vim/Tiny/'
        'checkpoint.pth',
        backbone=dict(arch='tiny')),
    head=dict(in_channels=8 * embed_dims))  # the base's 8 blocks
