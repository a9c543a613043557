"""binary_auc against scikit-learn's roc_auc_score and hand-derived values."""
import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from dinomamba_mm.evaluation import (auc_from_histograms, binary_auc,
                                     binary_auc_histograms, roc_from_histograms)


def _sklearn_aucs(scores, mask):
    return np.array([roc_auc_score(m.ravel(), s.ravel()) for s, m in zip(scores, mask)])


@pytest.mark.parametrize('dtype', [np.float64, np.float32, np.float16])
@pytest.mark.parametrize('levels', [None, 7, 2])
def test_exact_equals_sklearn_with_and_without_ties(levels, dtype):
    rng = np.random.default_rng(levels or 0)
    scores = rng.standard_normal((5, 23, 31))
    if levels is not None:  # few distinct values: many ties inside and across classes
        scores = np.floor(scores * levels / 2) / levels
        scores[:, 1, :5] = -0.0  # equal to +0.0 although its bits differ
    scores = scores.astype(dtype)
    mask = rng.random((5, 23, 31)) < rng.uniform(0.05, 0.9, size=(5, 1, 1))
    mask[:, 0, 0], mask[:, 0, 1] = True, False
    aucs = binary_auc(scores, mask, mode='exact')
    np.testing.assert_allclose(aucs, _sklearn_aucs(scores, mask), rtol=0, atol=1e-9)


def test_exact_accepts_tensors_and_float32():
    gen = torch.Generator().manual_seed(0)
    scores = torch.rand(3, 17, 19, generator=gen)
    mask = torch.rand(3, 17, 19, generator=gen) > 0.6
    got = binary_auc(scores, mask)
    np.testing.assert_allclose(got, _sklearn_aucs(scores.numpy(), mask.numpy()),
                               rtol=0, atol=1e-9)
    single = binary_auc(scores[1], mask[1])
    assert isinstance(single, float)
    assert abs(single - roc_auc_score(mask[1].numpy().ravel(),
                                      scores[1].numpy().ravel())) < 1e-9


def test_binned_close_to_sklearn_at_1000_thresholds():
    rng = np.random.default_rng(1)
    # smooth, structured maps as the metric sees them, plus noise
    yy, xx = np.mgrid[0:64, 0:64] / 64.0
    centres = rng.random((6, 2))
    scores = np.exp(-((yy - centres[:, :1, None]) ** 2 + (xx - centres[:, 1:, None]) ** 2)
                    * 8) + 0.3 * rng.random((6, 64, 64))
    mask = np.hypot(yy - centres[:, :1, None], xx - centres[:, 1:, None]) < 0.25
    mask ^= rng.random(mask.shape) < 0.1
    got = binary_auc(scores.astype(np.float32), mask, mode='binned', num_thresholds=1000)
    np.testing.assert_allclose(got, _sklearn_aucs(scores.astype(np.float32), mask),
                               atol=1e-3, rtol=0)


def test_binned_equals_exact_auc_of_quantised_map():
    rng = np.random.default_rng(2)
    scores = rng.random((3, 20, 20))
    mask = rng.random((3, 20, 20)) < 0.4
    num_bins = 10
    lo = scores.min(axis=(1, 2), keepdims=True)
    hi = scores.max(axis=(1, 2), keepdims=True)
    quantised = np.minimum(np.floor((scores - lo) / (hi - lo) * num_bins), num_bins - 1)
    np.testing.assert_allclose(
        binary_auc(scores, mask, mode='binned', num_thresholds=num_bins),
        _sklearn_aucs(quantised, mask), atol=1e-6, rtol=0)


@pytest.mark.parametrize('mode', ['exact', 'binned'])
def test_perfect_inverted_and_constant_maps(mode):
    mask = np.zeros((16, 16), dtype=bool)
    mask[4:10, 3:12] = True
    perfect = mask.astype(np.float64) + 0.01 * np.arange(256).reshape(16, 16) / 256
    assert binary_auc(perfect, mask, mode=mode) == pytest.approx(1.0, abs=1e-12)
    assert binary_auc(-perfect, mask, mode=mode) == pytest.approx(0.0, abs=1e-12)
    assert binary_auc(np.full((16, 16), 3.0), mask, mode=mode) == pytest.approx(0.5, abs=1e-12)


def test_histograms_give_pooled_auc_and_roc():
    rng = np.random.default_rng(3)
    scores = rng.random((2, 12, 12))
    mask = rng.random((2, 12, 12)) < 0.5
    fg_hist, bg_hist = binary_auc_histograms(scores, mask, num_thresholds=4)
    assert fg_hist.shape == (2, 4) and fg_hist.sum() == mask.sum()
    assert bg_hist.sum() == (~mask).sum()
    # hand count of map 0 on the normalised scale
    norm = (scores[0] - scores[0].min()) / (scores[0].max() - scores[0].min())
    expected = [((norm >= k / 4) & (norm < (k + 1) / 4) & mask[0]).sum() for k in range(3)]
    expected.append(((norm >= 0.75) & mask[0]).sum())
    np.testing.assert_array_equal(fg_hist[0], expected)
    fpr, tpr = roc_from_histograms(fg_hist.sum(0), bg_hist.sum(0))
    assert fpr[0] == 0 and tpr[0] == 0 and fpr[-1] == 1 and tpr[-1] == 1
    assert np.trapezoid(tpr, fpr) == pytest.approx(
        float(auc_from_histograms(fg_hist.sum(0), bg_hist.sum(0))), abs=1e-12)


def test_bad_inputs_name_the_argument_or_map():
    mask = np.zeros((2, 8, 8), dtype=bool)
    mask[:, :4] = True
    scores = np.random.default_rng(0).random((2, 8, 8))
    with pytest.raises(ValueError, match='fg_mask must be a boolean'):
        binary_auc(scores, mask.astype(np.uint8))
    with pytest.raises(ValueError, match='score_map must hold floating'):
        binary_auc(scores.astype(np.int64), mask)
    with pytest.raises(ValueError, match=r'fg_mask must have the shape.*\(2, 8, 7\)'):
        binary_auc(scores, mask[..., :7])
    with pytest.raises(ValueError, match=r'score_map must have shape .*\(8,\)'):
        binary_auc(scores[0, 0], mask[0, 0])
    with pytest.raises(ValueError, match='mode must be one of'):
        binary_auc(scores, mask, mode='trapz')
    with pytest.raises(ValueError, match=r'num_thresholds must be an int in \[2, 1000000\], got 1'):
        binary_auc(scores, mask, mode='binned', num_thresholds=1)
    with pytest.raises(ValueError, match=r'NaN or infinite values \(map 1\)'):
        bad = scores.copy()
        bad[1, 2, 2] = np.nan
        binary_auc(bad, mask)
    with pytest.raises(TypeError, match='score_map must be a numpy.ndarray'):
        binary_auc(scores.tolist(), mask)
    no_bg = mask.copy()
    no_bg[1] = True
    with pytest.raises(ValueError, match='map 1 has no background'):
        binary_auc(scores, no_bg)
    no_fg = mask.copy()
    no_fg[0] = False
    with pytest.raises(ValueError, match='map 0 has no foreground'):
        binary_auc(scores, no_fg, mode='binned')


@pytest.mark.parametrize('shape', [(0, 8, 8), (2, 0, 8), (0, 0, 0)])
@pytest.mark.parametrize('mode', ['exact', 'binned'])
def test_empty_batches_and_maps_are_refused(shape, mode):
    with pytest.raises(ValueError) as info:
        binary_auc(np.zeros(shape, dtype=np.float32), np.zeros(shape, dtype=bool), mode=mode)
    assert str(info.value) == f'score_map must hold at least one map of at least one pixel, ' \
                              f'got shape {shape}'


@pytest.mark.parametrize('num_thresholds, error', [(1, ValueError), (2_000_000, ValueError),
                                                   (10.0, TypeError)])
def test_num_thresholds_is_capped(num_thresholds, error):
    """10**9 bins tried to allocate 30 GiB (not run here: it gets the process killed); above
    10**6 bins the exact mode is the tool."""
    scores = np.random.default_rng(0).random((1, 8, 8))
    mask = np.zeros((1, 8, 8), dtype=bool)
    mask[0, :3] = True
    expected = (f'num_thresholds must be an int in [2, 1000000], got {num_thresholds!r}; for '
                "finer thresholds use mode='exact' (the ROC over every distinct score)")
    for call in (lambda: binary_auc(scores, mask, mode='binned', num_thresholds=num_thresholds),
                 lambda: binary_auc_histograms(scores, mask, num_thresholds=num_thresholds)):
        with pytest.raises(error) as info:
            call()
        assert str(info.value) == expected


@pytest.mark.parametrize('dtype, magnitude', [(np.float32, 3.0e38), (np.float64, 1.5e308)])
def test_binned_is_overflow_safe_near_the_float_range(dtype, magnitude):
    """max - min of scores spanning the float range overflows: every pixel fell into bin 0 and
    the AUC read 0.5 where sklearn (and the exact mode) read 1.0."""
    rng = np.random.default_rng(4)
    mask = rng.random((3, 16, 16)) < 0.4
    mask[:, 0, 0], mask[:, 0, 1] = True, False
    separated = np.where(mask, 1.0, -1.0) * rng.uniform(0.5, 1.0, mask.shape)
    noisy = (rng.uniform(-1.0, 1.0, mask.shape) + 0.5 * mask) / 1.5
    for unit in (separated, noisy):
        scores = (unit * magnitude).astype(dtype)
        assert np.isfinite(scores).all()
        reference = _sklearn_aucs(scores, mask)
        np.testing.assert_allclose(binary_auc(scores, mask, mode='exact'), reference,
                                   atol=1e-12, rtol=0)
        # 1000 bins of a spread-out map: the quantisation moves the AUC by well under 1e-2
        np.testing.assert_allclose(binary_auc(scores, mask, mode='binned'), reference,
                                   atol=1e-2, rtol=0)
    binned = binary_auc((separated * magnitude).astype(dtype), mask, mode='binned')
    np.testing.assert_allclose(binned, 1.0, atol=0, rtol=0)


@pytest.mark.parametrize('dtype, tiny', [(np.float32, np.float32(1e-45)),
                                         (np.float64, 5e-324)])
def test_binned_separates_maps_that_differ_only_below_the_normal_range(dtype, tiny):
    """Halving the smallest subnormal gives 0: the map looked constant (0.5, exact gave 1.0)."""
    mask = np.zeros((4, 4), dtype=bool)
    mask[:2] = True
    scores = np.where(mask, tiny, 0).astype(dtype)
    assert binary_auc(scores, mask, mode='exact') == 1.0  # sklearn's value for separated maps
    assert binary_auc(scores, mask, mode='binned') == 1.0
