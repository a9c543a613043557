# UperNet on DinoVim-T (width 256) initialised from the Dino-Mamba paper's released DINO
# teacher (paper-teacher, Hugging Face Vim/Tiny); otherwise the recipe of
# upernet_dinovim-base-p16_paper-teacher_8xb2-amp-160k_ade20k-512x512.py (the same bases).
_base_ = [
    '../_base_/models/upernet_dinovim.py',
    '../_base_/datasets/ade20k.py',
    '../_base_/schedules/schedule_ade20k_160k.py',
]
checkpoint = 'https://huggingface.co/TimingYang/Dino-Mamba/resolve/main/Vim/Tiny/checkpoint.pth'
model = dict(
    backbone=dict(
        arch='tiny',
        init_cfg=dict(
            type='dinomamba_mm.PaperCheckpoint', checkpoint=checkpoint,
            source='teacher')),
    neck=dict(embed_dim=256),
    decode_head=dict(in_channels=[256, 256, 256, 256]),
    auxiliary_head=dict(in_channels=256))
