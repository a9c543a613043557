"""The robustness test configs resolve to the standard layouts and metrics of each test set."""
import glob
import os
import os.path as osp
import sys

import pytest
from mmengine.config import Config

ROOT = osp.join(osp.dirname(__file__), '..', '..', 'configs', 'dino', 'benchmarks',
                'robustness')
sys.path.insert(0, osp.join(osp.dirname(__file__), '..'))
from helpers.tools import load_tool  # noqa: E402

# test set -> (dataset type, data_root, evaluator type) as the sets are distributed
EXPECTED = {
    'imagenet-a': ('CustomDataset', 'data/imagenet-a', 'dinomamba_mm.ClassSubsetAccuracy'),
    'imagenet-r': ('CustomDataset', 'data/imagenet-r', 'dinomamba_mm.ClassSubsetAccuracy'),
    'imagenet-sketch': ('CustomDataset', 'data/imagenet-sketch/sketch',
                        'dinomamba_mm.ClassSubsetAccuracy'),
    'imagenet-real': ('ImageNet', 'data/imagenet', 'dinomamba_mm.ReaLAccuracy'),
}


@pytest.mark.parametrize('path', sorted(glob.glob(osp.join(ROOT, '*.py'))),
                         ids=osp.basename)
def test_robustness_config_replaces_the_probe_test_set(path):
    test_set = osp.basename(path)[:-3].rsplit('_', 1)[1]
    dataset_type, data_root, evaluator_type = EXPECTED[test_set]
    cfg = Config.fromfile(path)
    dataset = cfg.test_dataloader.dataset
    assert (dataset.type, dataset.data_root) == (dataset_type, data_root)
    assert [t['type'] for t in dataset.pipeline] == [
        'dinomamba_mm.LoadImageFromFile', 'ResizeEdge', 'CenterCrop', 'PackInputs']
    assert cfg.test_dataloader.sampler == dict(type='DefaultSampler', shuffle=False)
    assert cfg.test_evaluator.type == evaluator_type
    if test_set == 'imagenet-real':
        assert dataset.split == 'val'


def _write_fake_layouts(root):
    """Each test set in its distributed layout, a few 40 px images per class folder."""
    import json

    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    wnids = [f'n{i:08d}' for i in range(10, 20)]  # ImageNet's class order = sorted wnids

    def image(path):
        os.makedirs(osp.dirname(path), exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(path)

    for wnid in wnids:
        image(osp.join(root, 'imagenet', 'train', wnid, f'{wnid}_1.JPEG'))
        image(osp.join(root, 'imagenet-sketch', 'sketch', wnid, 'sketch_1.JPEG'))
    for wnid in wnids[2:7]:  # the -A / -R subsets: 5 of the classes (top-5 is reported)
        image(osp.join(root, 'imagenet-a', wnid, '1.jpg'))
        image(osp.join(root, 'imagenet-r', wnid, 'art_1.jpg'))
    # ReaL: the flat val folder with meta/val.txt, and real.json in val-image order
    os.makedirs(osp.join(root, 'imagenet', 'meta'))
    with open(osp.join(root, 'imagenet', 'meta', 'val.txt'), 'w') as f:
        for k in range(1, 5):
            image(osp.join(root, 'imagenet', 'val', f'ILSVRC2012_val_{k:08d}.JPEG'))
            f.write(f'ILSVRC2012_val_{k:08d}.JPEG {k - 1}\n')
    with open(osp.join(root, 'imagenet', 'real.json'), 'w') as f:
        json.dump([[0], [1, 2], [], [3]], f)


@pytest.mark.parametrize('test_set', sorted(EXPECTED))
def test_robustness_config_runs_through_tools_test(test_set, tmp_path, monkeypatch):
    """tools/test.py on each test set's config with a (16-wide) probe checkpoint: the data
    loads in its layout and the set's metric comes out."""
    import torch
    from mmengine.registry import init_default_scope
    from mmengine.runner import Runner
    _write_fake_layouts(str(tmp_path))
    monkeypatch.chdir(tmp_path)  # the configs' data roots are relative: data/...
    os.symlink(str(tmp_path), str(tmp_path / 'data'))
    path = osp.join(ROOT, f'dinovim-base-p16_dino-ours_linear-probe_{test_set}.py')
    # 10 classes: the fake ImageNet class order (train/) has 10 wnids
    options = ['model.head.in_channels=128', 'model.head.num_classes=10',
               'test_dataloader.batch_size=4', 'test_dataloader.num_workers=0']
    tool = load_tool('tools/test.py')
    args = tool.parse_args([path, str(tmp_path / 'probe.pth'), '--work-dir',
                            str(tmp_path / 'work'), '--cfg-options', *options])
    cfg = tool.merge_args(Config.fromfile(path), args)
    cfg.model.backbone.backbone.arch = dict(embed_dims=16, num_layers=8, headdim=8, d_state=4)
    init_default_scope('mmpretrain')
    from mmpretrain.registry import MODELS
    torch.save(dict(state_dict=MODELS.build(cfg.model).state_dict(), meta={}),
               str(tmp_path / 'probe.pth'))
    metrics = Runner.from_cfg(cfg).test()
    expected = {'imagenet-real': ['real/top1'],
                'imagenet-sketch': ['accuracy/top1', 'accuracy/top5']}.get(
                    test_set, ['subset/top1', 'subset/top5'])
    assert sorted(metrics) == sorted(expected), metrics
    assert all(0 <= v <= 100 for v in metrics.values())


def test_sketch_labels_follow_the_wnids_not_the_folder_positions(tmp_path, monkeypatch):
    """A Sketch copy missing a class folder: a classifier that is always right (its scores put
    each image's wnid first, in the ImageNet order of train/) scores 100 %."""
    import shutil

    import torch
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import DATASETS, METRICS
    _write_fake_layouts(str(tmp_path))
    shutil.rmtree(tmp_path / 'imagenet-sketch' / 'sketch' / 'n00000010')
    monkeypatch.chdir(tmp_path)
    os.symlink(str(tmp_path), str(tmp_path / 'data'))
    cfg = Config.fromfile(osp.join(ROOT, 'dinovim-base-p16_dino-ours_linear-probe_'
                                         'imagenet-sketch.py'))
    init_default_scope('mmpretrain')
    dataset = DATASETS.build(dict(cfg.test_dataloader.dataset, pipeline=[]))
    metric = METRICS.build(cfg.test_evaluator)
    metric.dataset_meta = dataset.metainfo
    order = sorted(os.listdir(tmp_path / 'imagenet' / 'train'))
    samples = []
    for index in range(len(dataset)):
        info = dataset.get_data_info(index)
        scores = torch.zeros(len(order))
        scores[order.index(osp.basename(osp.dirname(info['img_path'])))] = 1.
        samples.append(dict(pred_score=scores, gt_label=torch.tensor([info['gt_label']])))
    metric.process(None, samples)
    assert metric.evaluate(len(samples))['accuracy/top1'] == 100.
