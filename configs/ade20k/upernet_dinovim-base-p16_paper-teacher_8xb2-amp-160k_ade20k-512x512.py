# UperNet on DinoVim-B initialised from the Dino-Mamba paper's released DINO teacher (paper-teacher,
# Hugging Face Vim/Base), ADE20K 512x512, 160k iterations at 8 GPUs x 2 images, AdamW with
# layer-wise lr decay 0.92 over the 24 blocks (Vim's segmentation recipe), slide inference (512
# crops, stride 341). Paper: 38.0 mIoU.
# `tools/dist_train.sh configs/dinovim_b_ade20k.py 8` (this config); the teacher backbone is loaded strictly from
# the model zoo (or set `checkpoint` to a local copy / a converted checkpoint).
_base_ = [
    '../_base_/models/upernet_dinovim.py',
    '../_base_/datasets/ade20k.py',
    '../_base_/schedules/schedule_ade20k_160k.py',
]
checkpoint = 'https://huggingface.co/TimingYang/Dino-Mamba/resolve/main/Vim/Base/checkpoint.pth'
model = dict(
    backbone=dict(
        init_cfg=dict(
            type='dinomamba_mm.PaperCheckpoint', checkpoint=checkpoint,
            source='teacher')))
