# Linear probe of the Dino-Mamba paper's released DinoMamba-Reg-B ("MambaR") teacher (Hugging Face
# Mambar/Base); its register layout is DinoMambaReg's default, its key names are mapped by
# models/backbones/checkpoint_mapping.py.
_base_ = './dinomamba-reg-b-p16_dino-ours_8xb128-linear-coslr-100e_in1k.py'

model = dict(
    backbone=dict(
        checkpoint='https://huggingface.co/Timing1/Dino-Mamba/resolve/main/Mambar/Base/'
        'checkpoint.pth'))
