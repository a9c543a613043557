# ADE20K (mmseg scope), data/ade/ADEChallengeData2016: 512x512 crops of images resized to
# (2048, 512) x [0.5, 2.0], reduce_zero_label=True (150 classes, "other" ignored).
# 2 images per GPU (8 GPUs -> the 16 per step of schedule_ade20k_160k.py).
_base_ = 'mmseg::_base_/datasets/ade20k.py'

train_dataloader = dict(batch_size=2)
