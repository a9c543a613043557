# ImageNet-ReaL (Beyer et al., "Are we done with ImageNet?"): the ImageNet val images in
# mmpretrain's layout (data/imagenet/val, meta/val.txt) with the reassessed multi-label ground
# truth data/imagenet/real.json (50000 lists in val-file order). Top-1 is correct when the
# prediction is in the image's set; images with an empty set are skipped.
_base_ = './robustness_test.py'

robustness_test_dataloader = dict(
    dataset=dict(type='ImageNet', data_root='data/imagenet', split='val'))
robustness_test_evaluator = dict(
    _delete_=True,
    type='dinomamba_mm.ReaLAccuracy',
    real_json='data/imagenet/real.json')
