# Linear probe of the Dino-Mamba paper's released DinoVim-B teacher (Hugging Face Vim/Base).
# The paper's key names are mapped to DinoVim's (checkpoints/paper_format.py) and
# token_layout='paper' reproduces its token order, so the features are the paper's.
_base_ = './dinovim-b-p16_dino-ours_8xb128-linear-coslr-100e_in1k.py'

model = dict(
    backbone=dict(
        checkpoint='https://huggingface.co/TimingYang/Dino-Mamba/resolve/main/Vim/Base/'
        'checkpoint.pth',
        backbone=dict(token_layout='paper')))
