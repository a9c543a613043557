"""BinaryAUC: how well per-image score maps separate foreground from background pixels."""
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from mmengine.evaluator import BaseMetric
from mmengine.logging import print_log

from dinomamba_mm.argument_checks import check_bool, check_choice, is_int
from dinomamba_mm.registry import METRICS
from ..functional.binary_auc import (AUC_MODES, auc_from_histograms, binary_auc,
                                     binary_auc_histograms, check_num_thresholds)

# Maps upsampled per interpolate call: bounds the buffer (64 float32 maps of 512 x 512 = 64 MB).
_MAPS_PER_CALL = 64


@METRICS.register_module()
class BinaryAUC(BaseMetric):
    """Binary-AUC of per-image maps against a foreground mask merged from a segmentation label.

    Inputs (one data sample per image, as ``ClassTokenMapModel`` writes them into mmseg's
    ``SegDataSample``):

    - ``pred_map``: float (h, w), (K, h, w) or (num_layers, K, h, w) over a patch grid;
    - ``gt_sem_seg``: the label map (``PixelData`` with ``data`` (1, H, W), as ``PackSegInputs``
      makes it from ``gt_seg_map``), at the original image size;
    - metainfo, all optional: ``map_extent`` (pixels of the network input covered by the map
      from its top-left; default ``batch_input_shape``) and ``img_shape`` (the resized image
      inside that input) — when both are present the map is upsampled to the extent, cropped to
      the image and resized to the label, else upsampled to the label directly (both bilinear,
      align_corners=False); ``map_layer_ids`` and ``map_names`` name the two map axes.

    Label ids -> classes: pixels whose id is in ``ignore_ids`` are left out, ids in
    ``background_ids`` are background, every other id is foreground. The defaults (background
    0, ignore 255) are the raw ids of Pascal VOC (0 background, 255 boundary), ImageNet-S-style
    labels with 0 = background and of ADE20K / the synthetic ADE-style set loaded with
    ``reduce_zero_label=False``, where 0 is "other" (no object) and counts as background, as in
    the paper. mmseg's ``ADE20KDataset`` defaults to ``reduce_zero_label=True``, which turns
    "other" into 255 and shifts classes down by one; for such pipelines set
    ``background_ids=(255,), ignore_ids=()`` (a warning is logged when a sample's metainfo says
    ``reduce_zero_label=True`` while 255 is ignored and not background).

    An image whose valid pixels are all foreground or all background has no Binary-AUC: it is
    skipped and counted (``num_skipped``), never NaN.

    Results (prefix ``binary_auc/``): ``mean`` (over images, layers and maps), ``layer{l}`` (over
    images and maps of block l), ``layer{l}_{name}`` for every map when K > 1, ``num_images``,
    ``num_skipped``; with ``pooled=True`` also ``pooled_layer{l}[_{name}]``: the AUC of all
    images' pixels pooled (always binned: histograms over ``num_thresholds`` bins of the per-map
    min-max normalised scores are summed over images).

    Args:
        mode: 'exact' (rank-based, equal to sklearn's roc_auc_score) or 'binned'.
        num_thresholds: T of the binned mode and of the pooled histograms, at most
            ``MAX_NUM_THRESHOLDS`` (10**6).
        background_ids: label ids counted as background.
        ignore_ids: label ids left out.
        pooled: also report pooled-pixel AUCs; costs num_layers * K * T * 8 bytes per image
            until evaluation.
        pred_key: data-sample field holding the maps.
        gt_key: data-sample field holding the label.
        collect_device, prefix: see ``mmengine.evaluator.BaseMetric``.
    """
    default_prefix = 'binary_auc'

    def __init__(self,
                 mode: str = 'exact',
                 num_thresholds: int = 1000,
                 background_ids: Sequence[int] = (0, ),
                 ignore_ids: Sequence[int] = (255, ),
                 pooled: bool = False,
                 pred_key: str = 'pred_map',
                 gt_key: str = 'gt_sem_seg',
                 collect_device: str = 'cpu',
                 prefix: Optional[str] = None) -> None:
        super().__init__(collect_device=collect_device, prefix=prefix)
        check_choice('mode', mode, AUC_MODES)
        check_num_thresholds(num_thresholds)
        check_bool('pooled', pooled)
        self.background_ids = _as_ids(background_ids, 'background_ids')
        self.ignore_ids = _as_ids(ignore_ids, 'ignore_ids')
        overlap = set(self.background_ids.tolist()) & set(self.ignore_ids.tolist())
        if overlap:
            raise ValueError(f'background_ids {self.background_ids.tolist()} and ignore_ids '
                             f'{self.ignore_ids.tolist()} share {sorted(overlap)}')
        self.mode = mode
        self.num_thresholds = num_thresholds
        self.pooled = pooled
        self.pred_key = pred_key
        self.gt_key = gt_key
        self._warned_reduce_zero_label = False

    # ------------------------------------------------------------------ per image
    def process(self, data_batch, data_samples: Sequence[dict]) -> None:
        """Compute each image's AUCs now; keep only them (and histograms when pooled)."""
        for sample in data_samples:
            self.results.append(self._process_one(sample))

    def _process_one(self, sample: dict) -> dict:
        if self.pred_key not in sample:
            raise KeyError(f'data sample has no {self.pred_key!r} field (keys: '
                           f'{sorted(sample)}); run a model that writes maps, e.g. '
                           'ClassTokenMapModel')
        maps = _as_4d(sample[self.pred_key])
        label = label_map(sample, self.gt_key)
        self._check_reduce_zero_label(sample)
        valid = ~np.isin(label, self.ignore_ids)
        foreground = valid & ~np.isin(label, self.background_ids)
        num_fg, num_valid = int(foreground.sum()), int(valid.sum())
        layer_ids = list(sample.get('map_layer_ids', range(maps.shape[0])))
        names = list(sample.get('map_names', [f'map{k}' for k in range(maps.shape[1])]))
        if len(layer_ids) != maps.shape[0] or len(names) != maps.shape[1]:
            raise ValueError(f'{self.pred_key} of shape {tuple(maps.shape)} does not match '
                             f'map_layer_ids {layer_ids} / map_names {names}')
        result = dict(layer_ids=layer_ids, names=names, skipped=False)
        if num_fg == 0 or num_fg == num_valid:
            result['skipped'] = True
            return result
        upsampled = maps_at_label_size(maps, label.shape, sample)  # (L * K, H, W)
        if valid.all():
            scores, fg_valid = upsampled.reshape(len(upsampled), -1), foreground.ravel()
        else:
            scores, fg_valid = upsampled[:, valid], foreground[valid]  # (L * K, P), (P,)
        masks = np.broadcast_to(fg_valid, scores.shape)
        result['auc'] = np.asarray(
            binary_auc(scores[:, None], masks[:, None], self.mode, self.num_thresholds)
        ).reshape(maps.shape[:2])
        if self.pooled:
            fg_hist, bg_hist = binary_auc_histograms(scores[:, None], masks[:, None],
                                                     self.num_thresholds)
            result['fg_hist'] = exact_counts(fg_hist.reshape(*maps.shape[:2], -1))
            result['bg_hist'] = exact_counts(bg_hist.reshape(*maps.shape[:2], -1))
        return result

    def _check_reduce_zero_label(self, sample: dict) -> None:
        if self._warned_reduce_zero_label or not sample.get('reduce_zero_label', False):
            return
        if 255 in self.ignore_ids and 255 not in self.background_ids:
            self._warned_reduce_zero_label = True
            print_log('BinaryAUC: labels were loaded with reduce_zero_label=True, so ADE20K\'s '
                      '"other" (raw 0) is now 255, which ignore_ids leaves out; the paper '
                      'counts it as background: set background_ids=(255,), ignore_ids=()',
                      logger='current', level=30)

    # ------------------------------------------------------------------ whole set
    def summarize(self, results: List[dict]) -> dict:
        """Arrays behind :meth:`compute_metrics`.

        Returns:
            dict with 'auc' (num_layers, K) mean over the evaluated images, 'per_image'
            (num_evaluated, num_layers, K), 'layer_ids', 'names', 'num_images', 'num_skipped'
            and, when pooled, 'fg_hist' / 'bg_hist' (num_layers, K, T) int64 sums and
            'pooled_auc' (num_layers, K).
        """
        if not results:
            raise ValueError('BinaryAUC got no images')
        layer_ids, names = results[0]['layer_ids'], results[0]['names']
        for result in results:
            if result['layer_ids'] != layer_ids or result['names'] != names:
                raise ValueError('all images must carry the same maps: got layers '
                                 f'{result["layer_ids"]} / maps {result["names"]} after '
                                 f'{layer_ids} / {names}')
        evaluated = [r for r in results if not r['skipped']]
        if not evaluated:
            raise ValueError(f'all {len(results)} images were skipped (their valid pixels are '
                             'all foreground or all background): check background_ids '
                             f'{self.background_ids.tolist()} and ignore_ids '
                             f'{self.ignore_ids.tolist()} against the dataset labels')
        per_image = np.stack([r['auc'] for r in evaluated])
        summary = dict(auc=per_image.mean(axis=0), per_image=per_image, layer_ids=layer_ids,
                       names=names, num_images=len(results),
                       num_skipped=len(results) - len(evaluated))
        if self.pooled:
            summary['fg_hist'] = np.sum([r['fg_hist'] for r in evaluated], axis=0,
                                        dtype=np.int64)
            summary['bg_hist'] = np.sum([r['bg_hist'] for r in evaluated], axis=0,
                                        dtype=np.int64)
            summary['pooled_auc'] = auc_from_histograms(summary['fg_hist'], summary['bg_hist'])
        return summary

    def compute_metrics(self, results: List[dict]) -> Dict[str, float]:
        summary = self.summarize(results)
        metrics = dict(mean=float(summary['per_image'].mean()))
        names = summary['names']
        for row, layer in enumerate(summary['layer_ids']):
            metrics[f'layer{layer}'] = float(summary['auc'][row].mean())
            for col, name in enumerate(names):  # one map: its AUC is the layer's mean
                key = f'layer{layer}_{name}' if len(names) > 1 else f'layer{layer}'
                metrics[key] = float(summary['auc'][row, col])
                if self.pooled:
                    metrics[f'pooled_{key}'] = float(summary['pooled_auc'][row, col])
        metrics['num_images'] = summary['num_images']
        metrics['num_skipped'] = summary['num_skipped']
        return metrics


def exact_counts(counts: np.ndarray) -> np.ndarray:
    """Pixel counts kept until evaluation: int32 (half the memory) when every count fits it,
    else int64 as they came."""
    return counts.astype(np.int32) if counts.max(initial=0) < 2**31 else counts


def _as_ids(ids: Sequence[int], name: str) -> np.ndarray:
    if is_int(ids) or not all(is_int(i) for i in ids):
        raise ValueError(f'{name} must be a sequence of ints, got {ids!r}')
    return np.asarray(list(ids), dtype=np.int64)


def _as_4d(maps) -> torch.Tensor:
    """(L, K, h, w) maps in float32, or float64 when given so (float64 scores that differ below
    float32's resolution would tie in float32: another AUC)."""
    maps = torch.as_tensor(maps).detach().cpu()
    if not maps.is_floating_point():
        raise ValueError(f'pred_map must hold floats, got dtype {maps.dtype}')
    if not maps.numel():
        raise ValueError('pred_map must hold at least one map of at least one pixel, got shape '
                         f'{tuple(maps.shape)}')
    if maps.dtype != torch.float64:
        maps = maps.float()  # float16 / bfloat16 widen exactly
    if maps.dim() == 2:
        return maps[None, None]
    if maps.dim() == 3:
        return maps[:, None]
    if maps.dim() == 4:
        return maps
    raise ValueError('pred_map must be (h, w), (K, h, w) or (num_layers, K, h, w), got shape '
                     f'{tuple(maps.shape)}')


def label_map(sample: dict, gt_key: str = 'gt_sem_seg') -> np.ndarray:
    """The (H, W) int64 label of a data-sample dict (PixelData dict, tensor or array)."""
    if gt_key not in sample:
        raise KeyError(f'data sample has no {gt_key!r} field (keys: {sorted(sample)}); load '
                       'the segmentation label with LoadAnnotations + PackSegInputs')
    label = sample[gt_key]
    if isinstance(label, dict):
        label = label['data']
    elif hasattr(label, 'data') and not isinstance(label, (torch.Tensor, np.ndarray)):
        label = label.data
    label = torch.as_tensor(label).detach().cpu().numpy()
    if label.ndim == 3 and label.shape[0] == 1:
        label = label[0]
    if label.ndim != 2:
        raise ValueError(f'{gt_key} must be (H, W) or (1, H, W), got shape {label.shape}')
    fractional = label[label != np.round(label)]  # empty for int dtypes; NaN lands here
    if fractional.size:
        raise ValueError(f'{gt_key} must hold integer label ids, got {label.dtype} values such '
                         f'as {fractional[0].item()!r}')
    return label.astype(np.int64, copy=False)


def maps_at_label_size(maps: torch.Tensor, size: Tuple[int, int], sample: dict) -> np.ndarray:
    """(L, K, h, w) maps -> (L * K, H, W) on the label's pixels, in the maps' dtype.

    ``sample`` (a data-sample dict) may give ``map_extent`` (else ``batch_input_shape``) and
    ``img_shape``: see :class:`BinaryAUC` for the geometry.
    """
    maps = maps.flatten(0, 1)
    extent = sample.get('map_extent', sample.get('batch_input_shape'))
    image = sample.get('img_shape')
    if extent is not None and image is not None and (
            int(extent[0]) < int(image[0]) or int(extent[1]) < int(image[1])):
        raise ValueError(f'the maps cover {tuple(extent)} input pixels but the image is '
                         f'{tuple(image)}: pad the inputs to whole patches (e.g. the data '
                         'preprocessor\'s test_cfg=dict(size_divisor=patch size))')
    out = np.empty((maps.shape[0], *size),
                   dtype=np.float64 if maps.dtype == torch.float64 else np.float32)
    for start in range(0, maps.shape[0], _MAPS_PER_CALL):
        chunk = maps[start:start + _MAPS_PER_CALL, None]
        if extent is not None and image is not None:
            chunk = F.interpolate(chunk, size=tuple(int(s) for s in extent), mode='bilinear',
                                  align_corners=False)
            chunk = chunk[..., :int(image[0]), :int(image[1])]
        if tuple(chunk.shape[-2:]) != tuple(size):
            chunk = F.interpolate(chunk, size=tuple(size), mode='bilinear',
                                  align_corners=False)
        out[start:start + chunk.shape[0]] = chunk[:, 0].numpy()
    return out
