# Cascade Mask R-CNN on DinoVim-S (width 512) initialised from the Dino-Mamba paper's released DINO
# teacher (paper-teacher, Hugging Face Vim/Small); otherwise the recipe of
# cascade-mask-rcnn_dinovim-base-p16_paper-teacher_16xb4-amp-lsj-100e_coco.py (the same bases).
_base_ = [
    '../_base_/models/cascade_mask_rcnn_dinovim.py',
    '../_base_/datasets/coco_instance.py',
    '../_base_/schedules/schedule_coco_lsj_100e.py',
]
checkpoint = 'https://huggingface.co/TimingYang/Dino-Mamba/resolve/main/Vim/Small/checkpoint.pth'
model = dict(
    backbone=dict(
        arch='small',
        init_cfg=dict(
            type='dinomamba_mm.PaperCheckpoint', checkpoint=checkpoint,
            source='teacher')),
    neck=[
        dict(
            type='mmseg.Feature2Pyramid',
            embed_dim=512,
            rescales=[4, 2, 1, 0.5],
            norm_cfg=dict(type='SyncBN', requires_grad=True)),
        dict(type='FPN', in_channels=[512] * 4, out_channels=256, num_outs=5),
    ])
