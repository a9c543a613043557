# ImageNet-1k (mmpretrain scope), data/imagenet/{train,val,meta/{train,val}.txt}:
# RandomResizedCrop 224 + flip for training, resize 256 / centre crop 224 for testing.
_base_ = 'mmpretrain::_base_/datasets/imagenet_bs64.py'
