"""BinaryAUC metric: label merging, geometry, skipping and pooling against sklearn + OpenCV."""
import cv2
import numpy as np
import pytest
import torch
from mmengine.evaluator import Evaluator
from mmengine.structures import PixelData
from mmseg.structures import SegDataSample
from sklearn.metrics import roc_auc_score

from dinomamba_mm.registry import METRICS


def _sample(pred_map, label, **metainfo):
    sample = SegDataSample(metainfo=metainfo)
    sample.gt_sem_seg = PixelData(data=torch.as_tensor(label)[None])
    sample.pred_map = torch.as_tensor(pred_map, dtype=torch.float32)
    return sample


def _dyadic(rng, shape):
    """Scores k / 16: with the power-of-two scale factors used here, bilinear weights are
    multiples of 1/16 too, so every implementation computes the same floats (and ties)."""
    return rng.integers(0, 256, size=shape) / 16


def _resize(image, height, width):
    """Bilinear, half-pixel centres (= torch's align_corners=False): an independent oracle."""
    return cv2.resize(np.ascontiguousarray(image, dtype=np.float32), (width, height),
                      interpolation=cv2.INTER_LINEAR)


def _labels(rng, shape):
    label = rng.integers(0, 5, size=shape)  # 0 background, 1..4 object classes
    label[rng.random(shape) < 0.1] = 255  # ignored
    return label


def test_per_layer_and_map_aucs_match_sklearn_on_upsampled_maps():
    rng = np.random.default_rng(0)
    maps = [_dyadic(rng, (2, 3, 4, 4)) for _ in range(2)]
    labels = [_labels(rng, (8, 8)), _labels(rng, (8, 8))]
    evaluator = Evaluator(dict(type='dinomamba_mm.BinaryAUC'))
    samples = [_sample(m, lab, map_layer_ids=[5, 11], map_names=['head0', 'head1', 'head2'])
               for m, lab in zip(maps, labels)]
    evaluator.process(samples)
    got = evaluator.evaluate(2)
    expected = np.zeros((2, 2, 3))
    for i, (m, lab) in enumerate(zip(maps, labels)):
        valid = lab != 255
        for layer in range(2):
            for head in range(3):
                scores = _resize(m[layer, head], 8, 8)
                expected[i, layer, head] = roc_auc_score(lab[valid] > 0, scores[valid])
    assert got['binary_auc/num_images'] == 2 and got['binary_auc/num_skipped'] == 0
    assert got['binary_auc/layer5_head2'] == pytest.approx(expected[:, 0, 2].mean(), abs=1e-9)
    assert got['binary_auc/layer11_head0'] == pytest.approx(expected[:, 1, 0].mean(), abs=1e-9)
    assert got['binary_auc/layer11'] == pytest.approx(expected[:, 1].mean(), abs=1e-9)
    assert got['binary_auc/mean'] == pytest.approx(expected.mean(), abs=1e-9)


def test_background_and_ignore_ids_are_configurable():
    rng = np.random.default_rng(1)
    label = rng.integers(0, 4, size=(6, 6))
    label[0] = 255
    pred = rng.random((6, 6))
    metric = METRICS.build(dict(type='dinomamba_mm.BinaryAUC', background_ids=(0, 3),
                                ignore_ids=(255, 2)))
    metric.process(None, [_sample(pred, label).to_dict()])
    valid = ~np.isin(label, (255, 2))
    expected = roc_auc_score(~np.isin(label[valid], (0, 3)), pred[valid])
    assert metric.evaluate(1)['binary_auc/layer0'] == pytest.approx(expected, abs=1e-9)


def test_map_is_cropped_to_the_image_inside_the_padded_input():
    rng = np.random.default_rng(2)
    pred = _dyadic(rng, (1, 1, 4, 4))
    label = rng.integers(0, 2, size=(10, 15))
    # network input 32 x 32 holds the image resized to 20 x 30; the label is at 10 x 15
    sample = _sample(pred, label, map_extent=(32, 32), img_shape=(20, 30), ori_shape=(10, 15))
    metric = METRICS.build(dict(type='dinomamba_mm.BinaryAUC'))
    metric.process(None, [sample.to_dict()])
    scores = _resize(_resize(pred[0, 0], 32, 32)[:20, :30], 10, 15)
    expected = roc_auc_score(label.ravel() > 0, scores.ravel())
    assert metric.evaluate(1)['binary_auc/layer0'] == pytest.approx(expected, abs=1e-9)


def test_single_class_images_are_skipped_and_counted_never_nan():
    rng = np.random.default_rng(3)
    good = _labels(rng, (8, 8))
    all_background = np.zeros((8, 8), dtype=np.int64)
    all_foreground_or_ignored = np.full((8, 8), 3)
    all_foreground_or_ignored[:2] = 255
    metric = METRICS.build(dict(type='dinomamba_mm.BinaryAUC', mode='binned'))
    metric.process(None, [_sample(rng.random((8, 8)), lab).to_dict()
                          for lab in (good, all_background, all_foreground_or_ignored)])
    result = metric.evaluate(3)
    assert result['binary_auc/num_images'] == 3 and result['binary_auc/num_skipped'] == 2
    assert all(np.isfinite(v) for v in result.values())
    metric.process(None, [_sample(rng.random((8, 8)), all_background).to_dict()])
    with pytest.raises(ValueError, match='all 1 images were skipped'):
        metric.evaluate(1)


def test_pooled_auc_equals_sklearn_on_pooled_quantised_scores():
    rng = np.random.default_rng(4)
    maps = [rng.random((8, 8)) for _ in range(3)]
    labels = [rng.integers(0, 3, size=(8, 8)) for _ in range(3)]
    metric = METRICS.build(dict(type='dinomamba_mm.BinaryAUC', pooled=True, num_thresholds=5))
    metric.process(None, [_sample(m, lab).to_dict() for m, lab in zip(maps, labels)])
    result = metric.evaluate(3)
    quantised = [np.minimum(np.floor((m - m.min()) / (m.max() - m.min()) * 5), 4)
                 for m in maps]
    expected = roc_auc_score(np.concatenate([lab.ravel() > 0 for lab in labels]),
                             np.concatenate([q.ravel() for q in quantised]))
    assert result['binary_auc/pooled_layer0'] == pytest.approx(expected, abs=1e-9)


def test_reduce_zero_label_warning_and_bad_arguments(caplog):
    with pytest.raises(ValueError, match='mode must be one of'):
        METRICS.build(dict(type='dinomamba_mm.BinaryAUC', mode='fast'))
    with pytest.raises(ValueError, match='share \\[0\\]'):
        METRICS.build(dict(type='dinomamba_mm.BinaryAUC', ignore_ids=(0, )))
    with pytest.raises(ValueError, match='background_ids must be a sequence of ints'):
        METRICS.build(dict(type='dinomamba_mm.BinaryAUC', background_ids=0))
    metric = METRICS.build(dict(type='dinomamba_mm.BinaryAUC'))
    with pytest.raises(KeyError, match="no 'pred_map' field"):
        metric.process(None, [{'gt_sem_seg': {'data': torch.zeros(1, 4, 4)}}])
    with pytest.raises(ValueError, match=r'pred_map must be .* got shape \(1, 1, 1, 4, 4\)'):
        metric.process(None, [_sample(torch.zeros(1, 1, 1, 4, 4), np.zeros((4, 4))).to_dict()])
    with pytest.raises(ValueError, match=r'maps cover \(16, 16\) input pixels but the image '):
        metric.process(None, [_sample(np.random.rand(2, 2), np.eye(20, dtype=np.int64),
                                      map_extent=(16, 16), img_shape=(20, 20)).to_dict()])
    label = np.zeros((4, 4), dtype=np.int64)
    label[:2] = 7
    from mmengine.logging import MMLogger
    MMLogger.get_instance('binary_auc_test')
    metric.process(None, [_sample(np.random.rand(4, 4), label, reduce_zero_label=True).to_dict()])
    assert metric._warned_reduce_zero_label


@pytest.mark.parametrize('num_thresholds, error', [(1, ValueError), (10**9, ValueError),
                                                   (True, TypeError)])
def test_metric_num_thresholds_is_capped(num_thresholds, error):
    with pytest.raises(error, match=r'num_thresholds must be an int in \[2, 1000000\]'):
        METRICS.build(dict(type='dinomamba_mm.BinaryAUC', mode='binned',
                           num_thresholds=num_thresholds))


@pytest.mark.parametrize('label', [np.array([[0.5, 1.0], [0.0, 0.0]]),
                                   np.array([[3.5, 0.0], [1.0, 0.0]], dtype=np.float32)])
def test_float_label_ids_that_are_not_integers_are_refused(label):
    """int() truncated them: 0.5 became background, 3.5 class 3, without a word."""
    metric = METRICS.build(dict(type='dinomamba_mm.BinaryAUC'))
    sample = {'pred_map': torch.rand(2, 2), 'gt_sem_seg': {'data': torch.as_tensor(label)[None]}}
    with pytest.raises(ValueError) as info:
        metric.process(None, [sample])
    bad = label[label != np.round(label)][0].item()
    assert str(info.value) == (f'gt_sem_seg must hold integer label ids, got {label.dtype} values '
                               f'such as {bad!r}')


def test_integral_float_labels_are_read_as_ids():
    metric = METRICS.build(dict(type='dinomamba_mm.BinaryAUC'))
    label = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    metric.process(None, [{'pred_map': label.clone(), 'gt_sem_seg': {'data': label[None]}}])
    assert metric.results[0]['auc'].tolist() == [[1.0]]


@pytest.mark.parametrize('shape', [(0, 0), (2, 0, 4), (1, 1, 3, 0)])
def test_empty_pred_maps_are_refused(shape):
    """A (0, 0) map failed inside torch's interpolate."""
    metric = METRICS.build(dict(type='dinomamba_mm.BinaryAUC'))
    sample = {'pred_map': torch.zeros(shape), 'gt_sem_seg': {'data': torch.eye(4)[None].long()}}
    with pytest.raises(ValueError) as info:
        metric.process(None, [sample])
    assert str(info.value) == ('pred_map must hold at least one map of at least one pixel, got '
                               f'shape {shape}')


@pytest.mark.parametrize('upsampled', [False, True])
def test_float64_maps_are_scored_in_float64(upsampled):
    """Foreground scores 1 + 1e-12 above the background's 1.0: both are 1.0 in float32, where
    the metric cast the maps (AUC 0.5); sklearn on the float64 scores gives 1.0."""
    label = np.zeros((8, 8), dtype=np.int64)
    label[2:6, 2:6] = 1
    size = 4 if upsampled else 8
    scores = np.ones((size, size))
    scores[size // 4:3 * size // 4, size // 4:3 * size // 4] += 1e-12
    sample = SegDataSample()
    sample.gt_sem_seg = PixelData(data=torch.as_tensor(label)[None])
    sample.pred_map = torch.as_tensor(scores, dtype=torch.float64)
    evaluator = Evaluator(dict(type='dinomamba_mm.BinaryAUC'))
    evaluator.process([sample])
    if upsampled:  # bilinear, align_corners=False, in float64: the oracle scores
        scores = torch.nn.functional.interpolate(torch.as_tensor(scores)[None, None], size=(8, 8),
                                                 mode='bilinear', align_corners=False)[0, 0]
    assert roc_auc_score(label.ravel() > 0, np.asarray(scores).ravel()) > 0.9
    assert evaluator.evaluate(1)['binary_auc/mean'] == roc_auc_score(
        label.ravel() > 0, np.asarray(scores).ravel())


def test_pooled_counts_keep_their_value():
    """The per-image histograms are stored compactly only when that is exact."""
    from dinomamba_mm.evaluation.metrics.binary_auc import exact_counts
    small = np.array([[3, 2**31 - 1]], dtype=np.int64)
    assert exact_counts(small).dtype == np.int32
    large = np.array([[3, 2**31]], dtype=np.int64)  # wrapped to a negative count in int32
    assert exact_counts(large).dtype == np.int64 and exact_counts(large)[0, 1] == 2**31
