"""mmseg's label-map loader that checks each map and names the file when it is wrong."""
from typing import Optional

import numpy as np
from mmseg.datasets.transforms import LoadAnnotations

from dinomamba_mm.argument_checks import check_int
from dinomamba_mm.registry import TRANSFORMS
from .load_image import unreadable_file


@TRANSFORMS.register_module()
class LoadSegAnnotations(LoadAnnotations):
    """mmseg's ``LoadAnnotations`` for semantic segmentation, with each label map checked.

    A ``ValueError`` names the label map (and its image) when the map cannot be decoded, has
    more than one channel (e.g. a colour-coded RGB map instead of class ids), has another size
    than its image (loaded before it: ``ori_shape``), or holds ids outside
    [0, ``num_classes``) other than ``ignore_index``, counted after ``reduce_zero_label`` and
    the dataset's ``label_map``. mmseg let these through to a wrong mIoU or an index error
    inside the loss.

    Args:
        num_classes (int, optional): The number of the dataset's classes; None leaves the ids
            unchecked. Defaults to None.
        ignore_index (int): The id the loss and the metrics leave out. Defaults to 255.
        **kwargs: mmseg's ``LoadAnnotations`` arguments.
    """

    def __init__(self, num_classes: Optional[int] = None, ignore_index: int = 255,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        if num_classes is not None:
            check_int('num_classes', num_classes, 1)
        self.num_classes = num_classes
        self.ignore_index = ignore_index

    def _load_seg_map(self, results: dict) -> None:
        path = results['seg_map_path']
        try:
            super()._load_seg_map(results)
        except Exception as error:
            raise ValueError(f'cannot load label map {path!r}: '
                             f'{unreadable_file(path, error)}') from error
        label = results['gt_seg_map']
        if label.ndim != 2:
            raise ValueError(f'label map {path!r} has shape {label.shape}: expected one channel '
                             'of class ids (H, W); convert a colour-coded map to ids')
        image = results.get('ori_shape')
        if image is not None and tuple(label.shape) != tuple(image[:2]):
            raise ValueError(f'label map {path!r} is {label.shape[0]}x{label.shape[1]} but its '
                             f"image {results.get('img_path')!r} is {image[0]}x{image[1]}")
        if self.num_classes is not None:
            bad = np.unique(label[(label >= self.num_classes) & (label != self.ignore_index)])
            if bad.size:
                raise ValueError(f'label map {path!r} holds ids {bad[:8].tolist()} beyond the '
                                 f'{self.num_classes} classes (ids 0..{self.num_classes - 1}, '
                                 f'{self.ignore_index} ignored; reduce_zero_label='
                                 f"{results.get('reduce_zero_label')})")
