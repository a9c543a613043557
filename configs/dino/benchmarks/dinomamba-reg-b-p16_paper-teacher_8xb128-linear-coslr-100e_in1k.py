# Linear probe of the Dino-Mamba paper's released DinoMamba-Reg-B ("MambaR") teacher (Hugging Face
# Mambar/Base), with the paper's network: its 7x7 position-embedding table kept (img_size=112) and
# resampled once per forward to the input's grid with DINO's convention (token_layout='paper'), so
# the features are the paper's; key names are mapped by checkpoints/paper_format.py.
_base_ = './dinomamba-reg-b-p16_dino-ours_8xb128-linear-coslr-100e_in1k.py'

model = dict(
    backbone=dict(
        checkpoint='https://huggingface.co/TimingYang/Dino-Mamba/resolve/main/Mambar/Base/'
        'checkpoint.pth',
        backbone=dict(img_size=112, token_layout='paper')))
