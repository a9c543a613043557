"""Features of a frozen backbone, computed once per image, as a dataset for probes and heads."""
import os.path as osp
from typing import Dict, List, Optional, Sequence

import numpy as np
from mmengine.dataset import BaseDataset
from mmengine.structures import BaseDataElement

from dinomamba_mm.argument_checks import check_bool
from dinomamba_mm.registry import DATASETS


def save_precomputed_features(path: str, features: np.ndarray,
                              labels: Optional[np.ndarray] = None,
                              seg_maps: Optional[np.ndarray] = None,
                              img_paths: Optional[Sequence[str]] = None) -> None:
    """Write the file :class:`PrecomputedFeatureDataset` reads (a ``.npz``).

    Args:
        path (str): Output file.
        features (np.ndarray): (N, C) class tokens or (N, h, w, C) patch-token maps (channels
            last, as an image), stored as float16.
        labels (np.ndarray, optional): (N,) class indices, for (N, C) features. Defaults to
            None.
        seg_maps (np.ndarray, optional): (N, H, W) label maps of the images, for (N, h, w, C)
            features. Defaults to None.
        img_paths (Sequence[str], optional): N source images. Defaults to None.
    """
    arrays = dict(features=np.asarray(features, dtype=np.float16))
    for name, value in (('labels', labels), ('seg_maps', seg_maps), ('img_paths', img_paths)):
        if value is not None:
            value = np.asarray(value)
            if len(value) != len(features):
                raise ValueError(f'{name} has {len(value)} entries for {len(features)} '
                                 'features; expected one per image')
            arrays[name] = value
    np.savez(path, **arrays)


@DATASETS.register_module()
class PrecomputedFeatureDataset(BaseDataset):
    """The features of a frozen backbone, one sample per image, from a file written by
    :func:`save_precomputed_features`.

    A linear probe or a segmentation head then trains and is scored on the features extracted
    once instead of running the backbone over the images every epoch; the model puts
    :class:`dinomamba_mm.PrecomputedFeatures` in the backbone's place. Each sample's features
    are ``results['img']`` (float32), so that the stock packers take them as the input:

    - (N, C) features (class tokens) are paired with the file's ``labels`` as ``gt_label``
      (mmpretrain's ``PackInputs`` gives a (C,) input and a ``DataSample``);
    - (N, h, w, C) features (patch tokens) with its ``seg_maps`` as ``gt_seg_map``, and
      ``img_shape`` / ``ori_shape`` the label map's size (mmseg's ``PackSegInputs`` gives a
      (C, h, w) input and a ``SegDataSample``; the decode head resizes its logits to the label
      map).

    Args:
        ann_file (str): The ``.npz`` file (joined to ``data_root``).
        metainfo (dict, optional): e.g. ``dict(classes=...)`` for the metrics. Defaults to None.
        pack_once (bool): Run the pipeline once per sample and serve its output again in later
            epochs, each time with a new data sample (the same tensors, a copy of the fields),
            so that what a data preprocessor or model sets on one does not reach the next
            epoch. Only for a pipeline without random transforms, such as the packer alone: on
            a probe's class tokens the per-sample packing is most of the training time. The
            packed samples stay in memory (a 64 px label map packs to 32 KiB). Defaults to
            False.
        **kwargs: mmengine ``BaseDataset`` arguments (``data_root``, ``pipeline``,
            ``indices``, ...).
    """

    def __init__(self, ann_file: str, metainfo: Optional[dict] = None, pack_once: bool = False,
                 **kwargs) -> None:
        check_bool('pack_once', pack_once)
        self.pack_once = pack_once
        self._packed: Dict[int, dict] = {}
        super().__init__(ann_file=ann_file, metainfo=metainfo, **kwargs)

    def prepare_data(self, idx: int) -> dict:
        if not self.pack_once:
            return super().prepare_data(idx)
        if idx not in self._packed:
            self._packed[idx] = super().prepare_data(idx)
        packed = self._packed[idx]
        if packed is None:
            return None
        return {key: value.new() if isinstance(value, BaseDataElement) else value
                for key, value in packed.items()}

    def load_data_list(self) -> List[dict]:
        if not osp.isfile(self.ann_file):
            raise FileNotFoundError(f'precomputed features {self.ann_file!r} not found; write '
                                    'them with save_precomputed_features')
        with np.load(self.ann_file) as saved:
            arrays = {name: saved[name] for name in saved.files}
        features = arrays['features'].astype(np.float32)
        if features.ndim == 2:
            annotation = 'labels'
        elif features.ndim == 4:
            annotation = 'seg_maps'
        else:
            raise ValueError(f'{self.ann_file!r}: features of shape {features.shape}; expected '
                             '(N, C) class tokens or (N, h, w, C) patch-token maps')
        if annotation not in arrays:
            raise ValueError(f'{self.ann_file!r}: features of shape {features.shape} need '
                             f'{annotation!r}, the file holds {sorted(arrays)}')
        data_list = []
        for index, feature in enumerate(features):
            info = dict(img=feature)
            if 'img_paths' in arrays:
                info['img_path'] = str(arrays['img_paths'][index])
            if annotation == 'labels':
                info['gt_label'] = int(arrays['labels'][index])
            else:
                seg_map = arrays['seg_maps'][index]
                info.update(gt_seg_map=seg_map, seg_fields=['gt_seg_map'],
                            img_shape=seg_map.shape, ori_shape=seg_map.shape)
            data_list.append(info)
        return data_list
