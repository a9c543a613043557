# ImageNet-Sketch test set (Wang et al.): 50889 sketches of all 1000 ImageNet classes, one folder
# per wnid (data/imagenet-sketch/sketch/n01440764/*.JPEG). Scored like ImageNet-A: each folder's
# wnid is located in the ImageNet order at run time, so a missing or an extra folder cannot shift
# the labels (with all 1000 folders this is the plain 1000-way accuracy, reported as accuracy/).
_base_ = './imagenet-a.py'

robustness_test_dataloader = dict(dataset=dict(data_root='data/imagenet-sketch/sketch'))
robustness_test_evaluator = dict(prefix='accuracy')
