# Cascade Mask R-CNN on DinoVim-B initialised from the Dino-Mamba paper's released DINO teacher
# (paper-teacher, Hugging Face Vim/Base), COCO with large-scale jitter at 1024x1024, ViTDet's
# 100-epoch schedule (184375 iterations of 16 GPUs x 4 images), AdamW with layer-wise lr decay 0.8
# over the 24 blocks (ViTDet's value for its 24-block ViT-L). Paper: 42.8 box AP / 37.4 mask AP.
# Fewer GPUs: --auto-scale-lr (our tools/train.py or mmdet's) scales the lr to the batch.
_base_ = [
    '../_base_/models/cascade_mask_rcnn_dinovim.py',
    '../_base_/datasets/coco_instance.py',
    '../_base_/schedules/schedule_coco_lsj_100e.py',
]
checkpoint = 'https://huggingface.co/TimingYang/Dino-Mamba/resolve/main/Vim/Base/checkpoint.pth'
model = dict(
    backbone=dict(
        init_cfg=dict(
            type='dinomamba_mm.PaperCheckpoint', checkpoint=checkpoint,
            source='teacher')))
