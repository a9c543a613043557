"""Accuracy of a 1000-way ImageNet classifier on a dataset of a subset of its classes.

ImageNet-A and ImageNet-R cover 200 of the 1000 ImageNet classes; the standard protocol scores a
1000-way model on them by keeping only the logits of those 200 classes before the arg-max.
"""
import os
import os.path as osp
import re
from typing import List, Optional, Sequence, Tuple, Union

import torch
from mmengine.evaluator import BaseMetric

from dinomamba_mm.argument_checks import check_argument, check_int, is_int
from dinomamba_mm.registry import METRICS

_WNID = re.compile(r'^n\d{8}$')


def read_imagenet_wnids(source: str) -> List[str]:
    """The ImageNet class order as a list of WordNet ids (``'n01440764'``, ...).

    Args:
        source: either a directory with one sub-folder per class (ImageNet's ``train/``, or the
            ImageNet-Sketch root: ImageNet's class index is the sorted wnid order), or a text file
            whose lines start with the wnid, in class order (e.g. ``LOC_synset_mapping.txt``:
            ``n01440764 tench, Tinca tinca``).
    """
    check_argument('imagenet_wnids', source, 'a path (str)', lambda v: isinstance(v, str))
    if osp.isdir(source):
        wnids = sorted(name for name in os.listdir(source)
                       if osp.isdir(osp.join(source, name)))
    elif osp.isfile(source):
        with open(source) as f:
            wnids = [line.split()[0] for line in f if line.strip()]
    else:
        raise ValueError(f'imagenet_wnids {source!r} is neither a directory of '
                         'class folders nor a text file of wnids')
    if not wnids:
        raise ValueError(f'imagenet_wnids {source!r} is ' + (
            'a directory without class folders' if osp.isdir(source) else 'an empty file')
            + "; expected ImageNet's train/ folder (one folder per wnid) or a file of wnids in "
            'class order (LOC_synset_mapping.txt)')
    bad = [w for w in wnids if not _WNID.match(w)][:5]
    if bad:
        raise ValueError(f'imagenet_wnids {source!r} gave {len(wnids)} entries '
                         f'with non-wnid names {bad}; expected names like '
                         "'n01440764'")
    if len(set(wnids)) != len(wnids):
        raise ValueError(f'imagenet_wnids {source!r} lists a wnid twice')
    return wnids


def subset_class_indices(subset_wnids: Sequence[str],
                         imagenet_wnids: Sequence[str]) -> List[int]:
    """Index in the full classifier of each subset class, in the subset's label order."""
    position = {wnid: i for i, wnid in enumerate(imagenet_wnids)}
    missing = [w for w in subset_wnids if w not in position]
    if missing:
        raise ValueError(f'{len(missing)} subset classes are not ImageNet '
                         f'classes, e.g. {missing[:5]}; expected wnids of the '
                         f'{len(imagenet_wnids)}-class order')
    return [position[w] for w in subset_wnids]


def subset_topk_accuracy(scores: torch.Tensor, labels: torch.Tensor,
                         class_indices: Sequence[int],
                         topk: Tuple[int, ...] = (1, )) -> List[float]:
    """Top-k accuracies (percent) with the scores restricted to a subset of the classes.

    Args:
        scores: (N, K) scores of the full K-way classifier.
        labels: (N,) labels in the subset's numbering (0 .. S - 1).
        class_indices: the S columns of ``scores`` that form the subset, in label order.
        topk: the k values.
    """
    if not len(labels):
        raise ValueError('no samples to score: the test set is empty')
    if scores.dim() != 2 or labels.shape != scores.shape[:1]:
        raise ValueError(f'scores must be (N, K) and labels (N,), got '
                         f'{tuple(scores.shape)} and {tuple(labels.shape)}')
    index = torch.as_tensor(list(class_indices), dtype=torch.long)
    if index.numel() == 0 or int(index.max()) >= scores.shape[1]:
        raise ValueError(f'class_indices must be in [0, {scores.shape[1]}), '
                         f'got {len(index)} indices up to '
                         f'{int(index.max()) if index.numel() else None}')
    if max(topk) > len(index):
        raise ValueError(f'topk {tuple(topk)} needs at least {max(topk)} classes in the subset, '
                         f'got {len(index)}')
    subset_scores = scores[:, index]
    ranked = subset_scores.topk(max(topk), dim=1).indices
    hits = ranked == labels[:, None]
    # counted exactly: a float32 mean of the hits is off in the 8th digit
    return [100.0 * int(hits[:, :k].any(dim=1).sum()) / len(labels) for k in topk]


@METRICS.register_module()
class ClassSubsetAccuracy(BaseMetric):
    """Top-k accuracy of a full ImageNet classifier on a dataset of a subset of its classes.

    The test dataset is a folder-per-wnid dataset (mmpretrain ``CustomDataset`` on
    ImageNet-A / ImageNet-R), so its labels are positions in the sorted list of its wnid folders;
    that list reaches the metric as ``dataset_meta['classes']``. Each wnid is located in the
    ImageNet class order read from ``imagenet_wnids`` at run time, and the arg-max is taken over
    those columns of the classifier's scores only.

    Args:
        imagenet_wnids (str): ImageNet class order (see :func:`read_imagenet_wnids`).
        topk (int | tuple[int]): Defaults to 1.
        collect_device (str): 'cpu' or 'gpu'. Defaults to 'cpu'.
        prefix (str, optional): metric-name prefix. Defaults to 'subset'.
    """
    default_prefix: Optional[str] = 'subset'

    def __init__(self, imagenet_wnids: str,
                 topk: Union[int, Tuple[int, ...]] = 1,
                 collect_device: str = 'cpu',
                 prefix: Optional[str] = None) -> None:
        super().__init__(collect_device=collect_device, prefix=prefix)
        self.imagenet_wnids = read_imagenet_wnids(imagenet_wnids)
        self.topk = (topk, ) if is_int(topk) else tuple(topk)
        if not self.topk:
            raise ValueError(f'topk must be an int >= 1 or a sequence of them, got {topk!r}')
        for k in self.topk:
            check_int('topk', k, 1)

    def process(self, data_batch, data_samples: Sequence[dict]) -> None:
        for sample in data_samples:
            scores = sample['pred_score'].cpu()
            if scores.numel() != len(self.imagenet_wnids):
                raise ValueError(
                    f'pred_score has {scores.numel()} classes but the ImageNet '
                    f'order has {len(self.imagenet_wnids)}')
            self.results.append((scores, int(sample['gt_label'])))

    def compute_metrics(self, results: list) -> dict:
        subset_wnids = (self.dataset_meta or {}).get('classes')
        if not subset_wnids:
            raise ValueError('dataset_meta has no classes: the test dataset '
                             'must be a folder-per-wnid dataset')
        if not results:
            raise ValueError('ClassSubsetAccuracy got no samples to score: the test set is '
                             'empty')
        indices = subset_class_indices(subset_wnids, self.imagenet_wnids)
        scores = torch.stack([s for s, _ in results])
        labels = torch.tensor([label for _, label in results])
        accs = subset_topk_accuracy(scores, labels, indices, self.topk)
        return {f'top{k}': acc for k, acc in zip(self.topk, accs)}
