"""Heads trained on features extracted once: PrecomputedFeatureDataset + PrecomputedFeatures
through the demo's probe and segmentation configs and the stock Runner, against independent
oracles (sklearn's logistic regression; an mIoU counted by hand)."""
import os.path as osp

import numpy as np
import pytest
import torch
from mmengine.config import Config

from dinomamba_mm.datasets import PrecomputedFeatureDataset, save_precomputed_features
from dinomamba_mm.models.backbones import PrecomputedFeatures

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
PROBE_CONFIG = osp.join(ROOT, 'configs', 'demo', 'linear-probe_features-demo_synthetic.py')
SEGMENTATION_CONFIG = osp.join(ROOT, 'configs', 'demo',
                               'linear-seg_features-demo_synthetic.py')


def _runner(config, features, work_dir, **changes):
    from mmengine.runner import Runner
    cfg = Config.fromfile(config)
    cfg.work_dir = str(work_dir)
    for loader, name in (('train_dataloader', 'train.npz'), ('val_dataloader', 'val.npz'),
                         ('test_dataloader', 'val.npz')):
        cfg[loader].dataset.update(data_root=str(features), ann_file=name)
    cfg.merge_from_dict(changes)
    cfg.default_hooks.logger.interval = 1
    return Runner.from_cfg(cfg)


def _blobs(rng, num, centres, spread):
    labels = rng.integers(len(centres), size=num)
    return centres[labels] + spread * rng.standard_normal((num, centres.shape[1])), labels


def test_probe_on_features_matches_sklearn(tmp_path, one_thread, plain_config_text):
    """The demo's probe config, trained on 7 overlapping Gaussian blobs in 96 dims (of another
    scale than unit, as a random init's features), predicts like sklearn's multinomial logistic
    regression on the same features: the same val accuracy within 2 points."""
    from sklearn.linear_model import LogisticRegression
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((7, 96)) * 0.35
    train, train_labels = _blobs(rng, 1400, centres, 1.0)
    val, val_labels = _blobs(rng, 700, centres, 1.0)
    scale = 7.0
    save_precomputed_features(str(tmp_path / 'train.npz'), scale * train, labels=train_labels)
    save_precomputed_features(str(tmp_path / 'val.npz'), scale * val, labels=val_labels)
    runner = _runner(PROBE_CONFIG, tmp_path, tmp_path / 'work', **{
        'train_cfg.max_epochs': 30, 'train_cfg.val_interval': 30,
        'param_scheduler.0.T_max': 30, 'param_scheduler.0.end': 30,
        'default_hooks.checkpoint.interval': 30})
    runner.train()
    metrics = runner.val()
    oracle = LogisticRegression(max_iter=2000).fit(train, train_labels)
    expected = 100 * (oracle.predict(val) == val_labels).mean()
    assert 30 < expected < 95  # neither chance nor separable: a test that can fail
    assert metrics['accuracy/top1'] == pytest.approx(expected, abs=2.0)


def test_segmentation_head_scores_a_hand_counted_miou(tmp_path, plain_config_text):
    """The demo's segmentation config (FCNHead without convolutions on 2 x 2 patch maps, logits
    resized to the 8 x 8 label map) with its 1 x 1 convolution set by hand to read the class off
    one-hot features: each pixel takes its quadrant's class. The label maps differ from the
    quadrants on counted pixels, so mmseg's IoUMetric must give the mIoU counted here."""
    num_classes = 8
    quadrants = np.array([[[1, 2], [0, 3]], [[0, 0], [5, 1]]])  # (image, patch row, patch col)
    features = np.eye(num_classes)[quadrants]  # (2, 2, 2, 8) one-hot, channels last
    predicted = quadrants.repeat(4, axis=1).repeat(4, axis=2)  # (2, 8, 8)
    labels = predicted.copy()
    labels[0, 0, :2] = 3  # two pixels of class 1 labelled 3
    labels[1, 7, 7] = 255  # ignored
    labels[1, 4:, :4] = 0  # the class-5 quadrant labelled background
    save_precomputed_features(str(tmp_path / 'val.npz'), features,
                              seg_maps=labels.astype(np.uint8))
    save_precomputed_features(str(tmp_path / 'train.npz'), features,
                              seg_maps=labels.astype(np.uint8))
    runner = _runner(SEGMENTATION_CONFIG, tmp_path, tmp_path / 'work', **{
        'model.decode_head.in_channels': num_classes})
    head = runner.model.decode_head
    with torch.no_grad():
        head.conv_seg.weight.copy_(10 * torch.eye(num_classes)[..., None, None])
        head.conv_seg.bias.zero_()
    metrics = runner.test()
    # IoU by hand, pixels of both images pooled, over the classes in the labels or the
    # predictions (class 5 is predicted where the labels say background: IoU 0)
    valid = labels != 255
    ious = []
    for c in range(num_classes):
        pred, true = (predicted == c) & valid, (labels == c) & valid
        if (pred | true).any():
            ious.append((pred & true).sum() / (pred | true).sum())
    assert len(ious) == 5 and 0.0 in ious
    assert metrics['mIoU'] == pytest.approx(100 * np.mean(ious), abs=0.01)


def test_samples_hold_the_features_and_their_annotations(tmp_path):
    rng = np.random.default_rng(1)
    tokens = rng.standard_normal((5, 4)).astype(np.float32)
    save_precomputed_features(str(tmp_path / 'cls.npz'), tokens, labels=[0, 1, 2, 1, 0],
                              img_paths=[f'x{i}.jpg' for i in range(5)])
    dataset = PrecomputedFeatureDataset(str(tmp_path / 'cls.npz'),
                                        pipeline=[dict(type='mmpretrain.PackInputs')])
    assert len(dataset) == 5
    sample = dataset[3]
    np.testing.assert_allclose(sample['inputs'].numpy(), tokens[3], atol=2e-3)  # float16
    assert int(sample['data_samples'].gt_label) == 1
    assert sample['data_samples'].img_path == 'x3.jpg'
    maps = rng.standard_normal((2, 3, 3, 4))
    seg = rng.integers(0, 4, size=(2, 12, 12)).astype(np.uint8)
    save_precomputed_features(str(tmp_path / 'maps.npz'), maps, seg_maps=seg)
    dataset = PrecomputedFeatureDataset(str(tmp_path / 'maps.npz'),
                                        pipeline=[dict(type='mmseg.PackSegInputs')])
    sample = dataset[1]
    np.testing.assert_allclose(sample['inputs'].numpy(), maps[1].transpose(2, 0, 1), atol=2e-3)
    np.testing.assert_array_equal(sample['data_samples'].gt_sem_seg.data[0].numpy(), seg[1])
    assert sample['data_samples'].ori_shape == (12, 12)


def test_bad_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match='nowhere.npz'):
        PrecomputedFeatureDataset(str(tmp_path / 'nowhere.npz'))
    save_precomputed_features(str(tmp_path / 'no_labels.npz'), np.zeros((3, 4)))
    with pytest.raises(ValueError, match="need 'labels'"):
        PrecomputedFeatureDataset(str(tmp_path / 'no_labels.npz'))
    save_precomputed_features(str(tmp_path / 'odd.npz'), np.zeros((3, 4, 4)),
                              labels=[0, 1, 2])
    with pytest.raises(ValueError, match=r'\(N, C\) class tokens or \(N, h, w, C\)'):
        PrecomputedFeatureDataset(str(tmp_path / 'odd.npz'))
    with pytest.raises(ValueError, match='labels has 2 entries for 3 features'):
        save_precomputed_features(str(tmp_path / 'x.npz'), np.zeros((3, 4)), labels=[0, 1])


def test_the_backbone_passes_features_through():
    backbone = PrecomputedFeatures()
    features = torch.randn(3, 5)
    assert backbone(features)[0] is features
    maps = torch.randn(2, 5, 3, 3)
    assert backbone(maps)[0] is maps
    with pytest.raises(TypeError, match=r'\(B, C\) or \(B, C, h, w\) tensor, got .*5'):
        backbone(torch.randn(5))
    assert not list(backbone.parameters())


def test_pack_once_packs_each_sample_once_and_serves_new_data_samples(tmp_path):
    """Over two epochs the packer runs once per sample; every serving equals what mmpretrain's
    packer gives without the option (the oracle), with a data sample of its own."""
    from mmpretrain.datasets.transforms import PackInputs
    rng = np.random.default_rng(2)
    tokens = rng.standard_normal((4, 3))
    save_precomputed_features(str(tmp_path / 'cls.npz'), tokens, labels=[2, 0, 1, 2])
    calls = []

    def counting_packer(results):
        calls.append(results['sample_idx'])
        return PackInputs()(results)

    cached = PrecomputedFeatureDataset(str(tmp_path / 'cls.npz'), pipeline=[counting_packer],
                                       pack_once=True)
    plain = PrecomputedFeatureDataset(str(tmp_path / 'cls.npz'), pipeline=[PackInputs()])
    served = [[cached[i] for i in range(4)] for _ in range(2)]
    assert sorted(calls) == [0, 1, 2, 3]
    for epoch in served:
        for i, sample in enumerate(epoch):
            expected = plain[i]
            torch.testing.assert_close(sample['inputs'], expected['inputs'])
            assert int(sample['data_samples'].gt_label) == int(expected['data_samples'].gt_label)
    first, second = served[0][1]['data_samples'], served[1][1]['data_samples']
    assert first is not second
    first.set_gt_score(torch.ones(3))  # as mmpretrain's preprocessor does with mixup
    assert 'gt_score' not in second and 'gt_score' not in cached[1]['data_samples']


def test_pack_once_must_be_a_bool(tmp_path):
    save_precomputed_features(str(tmp_path / 'cls.npz'), np.zeros((2, 3)), labels=[0, 1])
    with pytest.raises(TypeError, match="pack_once.*'yes'"):
        PrecomputedFeatureDataset(str(tmp_path / 'cls.npz'), pack_once='yes')
