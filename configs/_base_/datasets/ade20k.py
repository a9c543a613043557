# ADE20K (mmseg scope), data/ade/ADEChallengeData2016: 512x512 crops of images resized to
# (2048, 512) x [0.5, 2.0], reduce_zero_label=True (150 classes, "other" ignored).
_base_ = 'mmseg::_base_/datasets/ade20k.py'
