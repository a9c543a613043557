"""Binary-AUC: how well a score map over an image separates foreground from background.

For a score map S and a foreground mask, every threshold t gives Mask_t = {S >= t},
TPR(t) = |Mask_t n FG| / |FG| and FPR(t) = |Mask_t n BG| / |BG|; Binary-AUC is the area under
(FPR, TPR). 1 = the map ranks every foreground pixel above every background pixel, 0.5 = chance
(or a constant map), 0 = the map prefers background.

Two modes:

- ``'exact'``: the area under the ROC curve over all distinct scores, computed as the
  Mann-Whitney statistic P(S_fg > S_bg) + 0.5 P(S_fg = S_bg), ties counted half, which is what
  ``sklearn.metrics.roc_auc_score`` gives: a sort per class and two binary searches per map
  (float16 is widened to float32 first, exactly).
  Invariant to any strictly increasing transform of S, so min-max normalisation is irrelevant here.
- ``'binned'``: S is min-max normalised per map to [0, 1] and quantised into ``num_thresholds``
  equal bins (thresholds t_k = k / T, k = 0..T-1); one ``bincount`` per batch of maps gives the
  foreground / background histograms, from which the area is summed in closed form (no loop over
  thresholds). Equals the exact AUC of the quantised map; its error against the exact mode is at
  most half the fraction of (fg, bg) pairs that share a bin. T is at most
  ``MAX_NUM_THRESHOLDS``: each map's histograms take T x 16 bytes, and finer bins than that
  gain nothing over the exact mode. Maps spanning the whole float range (where max - min
  overflows) are normalised from halved scores, all others from the scores themselves, so maps
  that differ only below the normal range (subnormal scores) are binned right too.
"""
from typing import Iterator, Tuple, Union

import numpy as np
import torch

from dinomamba_mm.argument_checks import check_choice, check_int

ArrayLike = Union[np.ndarray, torch.Tensor]

AUC_MODES = ('exact', 'binned')
MAX_NUM_THRESHOLDS = 1_000_000
# Pixels (or bins) handled per bincount call in binned mode: bounds the temporary buffers
# (~100 MB).
_BINNED_PIXELS_PER_CALL = 1 << 22


def _to_numpy(value: ArrayLike, name: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.dtype in (torch.bfloat16, torch.float16):
            value = value.float()
        return value.numpy()
    if isinstance(value, np.ndarray):
        return value
    raise TypeError(f'{name} must be a numpy.ndarray or a torch.Tensor, '
                    f'got {type(value).__name__}')


def _check_inputs(score_map: ArrayLike,
                  fg_mask: ArrayLike) -> Tuple[np.ndarray, np.ndarray, bool]:
    """Validate and return (scores (N, P), mask (N, P), whether a single map was given)."""
    scores = _to_numpy(score_map, 'score_map')
    mask = _to_numpy(fg_mask, 'fg_mask')
    if not np.issubdtype(scores.dtype, np.floating):
        raise ValueError('score_map must hold floating-point scores, got dtype '
                         f'{scores.dtype}')
    if mask.dtype != np.bool_:
        raise ValueError(f'fg_mask must be a boolean mask, got dtype {mask.dtype}')
    if scores.ndim not in (2, 3):
        raise ValueError('score_map must have shape (H, W) or (N, H, W), got '
                         f'{tuple(scores.shape)}')
    if mask.shape != scores.shape:
        raise ValueError(f'fg_mask must have the shape of score_map '
                         f'{tuple(scores.shape)}, got {tuple(mask.shape)}')
    if scores.size == 0:
        raise ValueError('score_map must hold at least one map of at least one pixel, got '
                         f'shape {tuple(scores.shape)}')
    single = scores.ndim == 2
    if scores.dtype.itemsize < 4:  # float16: exact in float32, and binning needs the precision
        scores = scores.astype(np.float32)
    scores = scores.reshape(1 if single else scores.shape[0], -1)
    mask = mask.reshape(scores.shape)
    finite = np.isfinite(scores).all(axis=1)
    if not finite.all():
        bad = int(np.flatnonzero(~finite)[0])
        raise ValueError(f'score_map holds NaN or infinite values (map {bad})')
    num_fg = np.count_nonzero(mask, axis=1)
    for index, count in enumerate(num_fg):
        if count == 0 or count == mask.shape[1]:
            kind = 'no foreground' if count == 0 else 'no background'
            raise ValueError(f'fg_mask of map {index} has {kind} pixel, so its '
                             'Binary-AUC is undefined; skip such maps')
    return scores, mask, single


def _exact_auc(scores: np.ndarray, mask: np.ndarray) -> float:
    """Mann-Whitney AUC of one map: scores (P,), mask (P,) with both classes present.

    Each foreground score, searched in the sorted background scores, counts the background
    pixels below it (side 'left') and at or below it (side 'right'); the difference is its ties.
    """
    positive = scores[mask]
    negative = np.sort(scores[~mask])
    below = np.searchsorted(negative, positive, side='left').sum(dtype=np.int64)
    tied = np.searchsorted(negative, positive, side='right').sum(dtype=np.int64) - below
    return (float(below) + 0.5 * float(tied)) / (float(positive.size) * float(negative.size))


def binary_auc_histograms(score_map: ArrayLike, fg_mask: ArrayLike,
                          num_thresholds: int = 1000) -> Tuple[np.ndarray, np.ndarray]:
    """Foreground / background histograms of min-max normalised maps over T equal bins.

    Bin k holds the pixels with k / T <= S_norm < (k + 1) / T (the maximum falls into bin T-1);
    a constant map puts every pixel into bin 0. Summed over images, the histograms give the
    pooled-pixel ROC curve and AUC.

    Args:
        score_map (torch.Tensor | np.ndarray): Float scores, shape (H, W) or (N, H, W).
        fg_mask (torch.Tensor | np.ndarray): Bool foreground mask of the same shape.
        num_thresholds (int): T, the number of bins / thresholds (in
            [2, ``MAX_NUM_THRESHOLDS``]). Defaults to 1000.

    Returns:
        Tuple[np.ndarray, np.ndarray]: ``(fg_hist, bg_hist)``, int64 arrays of shape (N, T)
        ((1, T) for a single map).
    """
    check_num_thresholds(num_thresholds)
    scores, mask, _ = _check_inputs(score_map, fg_mask)
    fg_blocks, bg_blocks = zip(*_histogram_blocks(scores, mask, num_thresholds))
    return np.concatenate(fg_blocks), np.concatenate(bg_blocks)


def check_num_thresholds(num_thresholds: int) -> None:
    """Raise TypeError / ValueError unless ``num_thresholds`` is an int in
    [2, ``MAX_NUM_THRESHOLDS``]."""
    try:
        check_int('num_thresholds', num_thresholds, 2, MAX_NUM_THRESHOLDS)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{error}; for finer thresholds use mode='exact' (the ROC over "
                          'every distinct score)') from None


def _bin_indices(block: np.ndarray, num_thresholds: int) -> np.ndarray:
    """(M, P) scores -> (M, P) int64 bins in [0, T) of the per-map min-max normalised scores.

    Maps whose max - min overflows are normalised from halved scores (halving is exact at that
    magnitude; below the normal range it would round the scores to 0), and dividing by the span
    before scaling by T keeps every step <= T; a constant map goes into bin 0.
    """
    lowest = block.min(axis=1, keepdims=True)
    highest = block.max(axis=1, keepdims=True)
    with np.errstate(over='ignore'):
        scale = np.where(np.isfinite(highest - lowest), 1, 0.5).astype(block.dtype)
    lowest *= scale
    span = highest * scale - lowest
    scaled = block * scale
    scaled -= lowest
    scaled /= np.where(span > 0, span, 1)
    scaled *= num_thresholds
    bins = scaled.astype(np.int64)
    np.minimum(bins, num_thresholds - 1, out=bins)
    return bins


def _histogram_blocks(scores: np.ndarray, mask: np.ndarray,
                      num_thresholds: int) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
    """(fg_hist (M, T), bg_hist (M, T)) int64 for consecutive blocks of maps of bounded size."""
    num_maps, num_pixels = scores.shape
    maps_per_call = max(1, _BINNED_PIXELS_PER_CALL // max(num_pixels, num_thresholds))
    for start in range(0, num_maps, maps_per_call):
        block = scores[start:start + maps_per_call]
        bins = _bin_indices(block, num_thresholds)
        # one bincount for all maps of the block: key = (map, bin, is_fg)
        offsets = np.arange(block.shape[0], dtype=np.int64)[:, None] * num_thresholds
        keys = (bins + offsets) * 2 + mask[start:start + maps_per_call]
        counts = np.bincount(keys.ravel(), minlength=block.shape[0] * num_thresholds * 2)
        counts = counts.reshape(-1, num_thresholds, 2)
        yield counts[..., 1], counts[..., 0]


def auc_from_histograms(fg_hist: np.ndarray, bg_hist: np.ndarray) -> np.ndarray:
    """Area under the ROC curve traced by thresholds at the bin edges.

    Args:
        fg_hist (np.ndarray): Foreground counts of shape (..., T), bin 0 = lowest scores.
        bg_hist (np.ndarray): Background counts of shape (..., T).

    Returns:
        np.ndarray: The float64 AUC of shape (...,): sum over bins of
        bg_k * (fg above bin k + fg_k / 2) / (|FG| |BG|), which is the trapezoidal area under
        (FPR, TPR). NaN where a class is empty.
    """
    fg_hist = np.asarray(fg_hist, dtype=np.float64)
    bg_hist = np.asarray(bg_hist, dtype=np.float64)
    fg_above = np.cumsum(fg_hist[..., ::-1], axis=-1)[..., ::-1] - fg_hist
    pairs = (bg_hist * (fg_above + 0.5 * fg_hist)).sum(axis=-1)
    with np.errstate(invalid='ignore', divide='ignore'):
        return pairs / (fg_hist.sum(axis=-1) * bg_hist.sum(axis=-1))


def roc_from_histograms(fg_hist: np.ndarray,
                        bg_hist: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """ROC points (FPR, TPR) of thresholds from above the top bin down to 0.

    Args:
        fg_hist (np.ndarray): Foreground counts of shape (T,), bin 0 = lowest scores; not all
            zero.
        bg_hist (np.ndarray): Background counts of shape (T,), likewise; not all zero.

    Returns:
        Tuple[np.ndarray, np.ndarray]: ``(fpr, tpr)``, float64 arrays of shape (T + 1,), both
        rising from 0 to 1.
    """
    fg_hist = np.asarray(fg_hist, dtype=np.float64)
    bg_hist = np.asarray(bg_hist, dtype=np.float64)
    if fg_hist.ndim != 1 or fg_hist.shape != bg_hist.shape:
        raise ValueError('fg_hist and bg_hist must be 1-D of equal length, got '
                         f'{fg_hist.shape} and {bg_hist.shape}')
    if fg_hist.sum() == 0 or bg_hist.sum() == 0:
        raise ValueError('ROC needs both foreground and background pixels, got '
                         f'{int(fg_hist.sum())} fg and {int(bg_hist.sum())} bg')
    tpr = np.concatenate([[0.0], np.cumsum(fg_hist[::-1])]) / fg_hist.sum()
    fpr = np.concatenate([[0.0], np.cumsum(bg_hist[::-1])]) / bg_hist.sum()
    return fpr, tpr


def binary_auc(score_map: ArrayLike,
               fg_mask: ArrayLike,
               mode: str = 'exact',
               num_thresholds: int = 1000) -> Union[float, np.ndarray]:
    """Binary-AUC of one map or of N maps.

    Args:
        score_map (torch.Tensor | np.ndarray): Float scores of shape (H, W) or (N, H, W); a
            tensor (any device) or an ndarray. No NaN / inf.
        fg_mask (torch.Tensor | np.ndarray): Bool mask of the same shape; True = foreground.
        mode (str): ``'exact'`` (rank-based, equal to ``sklearn.metrics.roc_auc_score``) or
            ``'binned'`` (``num_thresholds`` equal bins of the min-max normalised map).
            Defaults to 'exact'.
        num_thresholds (int): T for ``'binned'`` (in [2, ``MAX_NUM_THRESHOLDS``]); ignored by
            ``'exact'``. Defaults to 1000.

    Returns:
        float | np.ndarray: A float for one (H, W) map, else a float64 ndarray of shape (N,).
        Never NaN: a map without a
        foreground or without a background pixel raises ``ValueError`` naming its index.
    """
    check_choice('mode', mode, AUC_MODES)
    if mode == 'binned':
        check_num_thresholds(num_thresholds)
    scores, mask, single = _check_inputs(score_map, fg_mask)
    if mode == 'exact':
        aucs = np.array([_exact_auc(s, m) for s, m in zip(scores, mask)],
                        dtype=np.float64)
    else:
        aucs = np.concatenate([auc_from_histograms(fg, bg) for fg, bg in
                               _histogram_blocks(scores, mask, num_thresholds)])
    return float(aucs[0]) if single else aucs
