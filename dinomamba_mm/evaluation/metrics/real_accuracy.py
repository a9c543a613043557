"""ImageNet-ReaL top-1 accuracy (Beyer et al., "Are we done with ImageNet?", 2020)."""
import json
import os.path as osp
import re
from typing import List, Optional, Sequence

import torch
from mmengine.evaluator import BaseMetric

from dinomamba_mm.argument_checks import check_argument
from dinomamba_mm.registry import METRICS

_VAL_INDEX = re.compile(r'ILSVRC2012_val_(\d{8})')


def real_top1_accuracy(pred_labels: Sequence[int],
                       real_labels: Sequence[Sequence[int]]) -> float:
    """Top-1 accuracy against ReaL's label sets, in percent.

    A prediction counts as correct when it is in the image's set of plausible labels; images
    whose set is empty (no label the raters agreed on) are left out of the count.

    Args:
        pred_labels: the predicted class of each image (N values).
        real_labels: the ReaL label set of each image (N lists).

    Returns:
        float: 100 * correct / number of images with a non-empty set.
    """
    if len(pred_labels) != len(real_labels):
        raise ValueError(f'pred_labels has {len(pred_labels)} entries but '
                         f'real_labels has {len(real_labels)}; expected one '
                         'label set per prediction')
    kept = [(int(p), set(s)) for p, s in zip(pred_labels, real_labels)
            if len(s) > 0]
    if not kept:
        raise ValueError('every ReaL label set is empty: nothing to score')
    correct = sum(p in s for p, s in kept)
    return 100.0 * correct / len(kept)


def val_image_index(img_path: str) -> int:
    """0-based index of an ImageNet val image from its file name.

    ``.../ILSVRC2012_val_00000001.JPEG`` -> 0, the row of ``real.json`` that holds its labels.
    """
    match = _VAL_INDEX.search(osp.basename(img_path))
    if match is None:
        raise ValueError(
            f'img_path {img_path!r} is not an ImageNet val file name; expected '
            "'ILSVRC2012_val_<8 digits>.<ext>' (ReaL labels are indexed by it)")
    return int(match.group(1)) - 1


@METRICS.register_module()
class ReaLAccuracy(BaseMetric):
    """Top-1 accuracy on ImageNet-ReaL, for a 1000-way classifier on the ImageNet val images.

    ReaL's ``real.json`` is a list of 50000 label lists in val-file order
    (``ILSVRC2012_val_00000001.JPEG`` first). Each test sample is matched to its list through
    the number in its ``img_path``, so the val images may be read in any order (mmpretrain's
    ``ImageNet`` dataset with ``split='val'``). Images with an empty list are skipped.

    Args:
        real_json (str): path of ``real.json``.
        collect_device (str): 'cpu' or 'gpu'. Defaults to 'cpu'.
        prefix (str, optional): metric-name prefix. Defaults to 'real'.
    """
    default_prefix: Optional[str] = 'real'

    def __init__(self, real_json: str, collect_device: str = 'cpu',
                 prefix: Optional[str] = None) -> None:
        super().__init__(collect_device=collect_device, prefix=prefix)
        check_argument('real_json', real_json, 'a path (str)', lambda v: isinstance(v, str))
        if not osp.isfile(real_json):
            raise ValueError(f'real_json {real_json!r} is not a file; expected '
                             'the path of ImageNet-ReaL real.json')
        with open(real_json) as f:
            text = f.read()
        try:
            self.real_labels: List[List[int]] = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f'real_json {real_json!r} is '
                             + ('empty' if not text.strip() else f'not valid JSON ({error})')
                             + '; expected ImageNet-ReaL\'s real.json, a list of label lists '
                             '(one per val image)') from error
        if not isinstance(self.real_labels, list):
            raise ValueError(f'real_json {real_json!r} holds a '
                             f'{type(self.real_labels).__name__}; expected a '
                             'list of label lists (one per val image)')

    def process(self, data_batch, data_samples: Sequence[dict]) -> None:
        for sample in data_samples:
            index = val_image_index(sample['img_path'])
            if index >= len(self.real_labels):
                raise ValueError(
                    f"img_path {sample['img_path']!r} is val image {index + 1} "
                    f'but real.json has {len(self.real_labels)} entries')
            if 'pred_score' in sample:
                pred = int(torch.as_tensor(sample['pred_score']).argmax())
            else:
                pred = int(sample['pred_label'])
            self.results.append((pred, self.real_labels[index]))

    def compute_metrics(self, results: list) -> dict:
        preds = [pred for pred, _ in results]
        labels = [label_set for _, label_set in results]
        return {'top1': real_top1_accuracy(preds, labels)}
