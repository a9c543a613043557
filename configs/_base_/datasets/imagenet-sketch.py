# ImageNet-Sketch test set (Wang et al.): 50889 sketches of all 1000 ImageNet classes, one folder
# per wnid (data/imagenet-sketch/sketch/n01440764/*.JPEG). The sorted folders are the ImageNet
# class order, so the plain 1000-way accuracy applies.
_base_ = './robustness_test.py'

robustness_test_dataloader = dict(dataset=dict(data_root='data/imagenet-sketch/sketch'))
robustness_test_evaluator = dict(_delete_=True, type='Accuracy', topk=(1, 5))
