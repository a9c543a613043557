"""mmpretrain's ColorJitter with a hue shift that works on numpy >= 2."""
from typing import Dict

import mmcv
import numpy as np
from mmpretrain.datasets.transforms import ColorJitter
from PIL import Image

from dinomamba_mm.registry import TRANSFORMS


def shift_hue(img: np.ndarray, hue_factor: float) -> np.ndarray:
    """Rotate the hue of a BGR uint8 image (H, W, 3) by ``hue_factor`` turns (in [-0.5, 0.5]).

    The PIL HSV hue channel (uint8) is shifted by ``int(hue_factor * 255)`` modulo 256, the
    arithmetic of mmcv's / torchvision's PIL path, whose ``np.uint8(negative)`` raises
    ``OverflowError`` on numpy >= 2.
    """
    if not -0.5 <= hue_factor <= 0.5:
        raise ValueError(f'hue_factor must be in [-0.5, 0.5], got {hue_factor}')
    if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f'img must be a (H, W, 3) uint8 BGR array, got {img.dtype} {img.shape}')
    h, s, v = Image.fromarray(np.ascontiguousarray(img[..., ::-1])).convert('HSV').split()
    shifted = (np.asarray(h, dtype=np.int16) + int(hue_factor * 255)) % 256
    h = Image.fromarray(shifted.astype(np.uint8), 'L')
    rgb = Image.merge('HSV', (h, s, v)).convert('RGB')
    return np.asarray(rgb, dtype=np.uint8)[..., ::-1].copy()


@TRANSFORMS.register_module()
class WrappingHueColorJitter(ColorJitter):
    """:class:`mmpretrain.ColorJitter` (same arguments, same random draws, same order of the
    four adjustments) whose hue step uses :func:`shift_hue`: mmcv 2.1's ``adjust_hue`` fails
    on numpy >= 2 for every negative hue factor, i.e. on half of the jittered images.
    Brightness, contrast and saturation still go through mmcv.
    """

    def transform(self, results: Dict) -> Dict:
        img = results['img']
        trans_inds, brightness, contrast, saturation, hue = self._rand_params()
        for index in trans_inds:
            if index == 0 and brightness is not None:
                img = mmcv.adjust_brightness(img, brightness, backend=self.backend)
            elif index == 1 and contrast is not None:
                img = mmcv.adjust_contrast(img, contrast, backend=self.backend)
            elif index == 2 and saturation is not None:
                img = mmcv.adjust_color(img, alpha=saturation, backend=self.backend)
            elif index == 3 and hue is not None:
                img = shift_hue(img, hue)
        results['img'] = img
        return results
