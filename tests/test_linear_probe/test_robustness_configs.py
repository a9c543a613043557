"""The robustness test configs resolve to the standard layouts and metrics of each test set."""
import glob
import os.path as osp

import pytest
from mmengine.config import Config

ROOT = osp.join(osp.dirname(__file__), '..', '..', 'configs', 'robustness')

# test set -> (dataset type, data_root, evaluator type) as the sets are distributed
EXPECTED = {
    'imagenet-a': ('CustomDataset', 'data/imagenet-a', 'dinomamba_mm.ClassSubsetAccuracy'),
    'imagenet-r': ('CustomDataset', 'data/imagenet-r', 'dinomamba_mm.ClassSubsetAccuracy'),
    'imagenet-sketch': ('CustomDataset', 'data/imagenet-sketch/sketch', 'Accuracy'),
    'imagenet-real': ('ImageNet', 'data/imagenet', 'dinomamba_mm.ReaLAccuracy'),
}


@pytest.mark.parametrize('path', sorted(glob.glob(osp.join(ROOT, '*.py'))),
                         ids=osp.basename)
def test_robustness_config_replaces_the_probe_test_set(path):
    test_set = osp.basename(path)[:-3].split('_linear-probe_')[1]
    dataset_type, data_root, evaluator_type = EXPECTED[test_set]
    cfg = Config.fromfile(path)
    dataset = cfg.test_dataloader.dataset
    assert (dataset.type, dataset.data_root) == (dataset_type, data_root)
    assert [t['type'] for t in dataset.pipeline] == [
        'LoadImageFromFile', 'ResizeEdge', 'CenterCrop', 'PackInputs']
    assert cfg.test_dataloader.sampler == dict(type='DefaultSampler', shuffle=False)
    assert cfg.test_evaluator.type == evaluator_type
    if test_set == 'imagenet-real':
        assert dataset.split == 'val'
