# ImageNet-R test set (Hendrycks et al.): 30000 renditions of 200 ImageNet classes, one folder
# per wnid (data/imagenet-r/n01443537/*.jpg); scored like ImageNet-A (logits restricted to the
# 200 classes, located in the ImageNet order at run time).
_base_ = './imagenet-a.py'

robustness_test_dataloader = dict(dataset=dict(data_root='data/imagenet-r'))
