# ImageNet-A test set (Hendrycks et al.): 7500 images of 200 ImageNet classes, one folder per
# wnid (data/imagenet-a/n01498041/*.jpg). A 1000-way classifier is scored with its logits
# restricted to those 200 classes; their positions in the ImageNet order are found at run time
# from the folder names and `imagenet_wnids` (ImageNet's train/ folder, whose sorted wnids are the
# class order, or a file of wnids in class order such as LOC_synset_mapping.txt).
_base_ = './robustness_test.py'

robustness_test_dataloader = dict(dataset=dict(data_root='data/imagenet-a'))
robustness_test_evaluator = dict(
    _delete_=True,
    type='dinomamba_mm.ClassSubsetAccuracy',
    imagenet_wnids='data/imagenet/train',
    topk=(1, 5))
