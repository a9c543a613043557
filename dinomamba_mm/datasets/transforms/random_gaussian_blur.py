"""Gaussian blur with a radius drawn per image (DINO / BYOL augmentation)."""
from typing import Dict, Tuple

import numpy as np
from mmcv.transforms import BaseTransform
from mmcv.transforms.utils import cache_randomness
from PIL import Image, ImageFilter

from dinomamba_mm.registry import TRANSFORMS


@TRANSFORMS.register_module()
class RandomGaussianBlur(BaseTransform):
    """With probability ``prob``, blur ``results['img']`` with a radius ~ U(radius_range).

    mmpretrain's ``GaussianBlur`` draws the radius from ``[0, magnitude]`` instead, so it
    cannot express DINO's ``U(0.1, 2.0)``. Randomness comes from ``np.random`` (seeded by
    mmengine per process and per dataloader worker).

    Required / modified key: ``img`` (H, W, C) or (H, W) uint8 array.

    Args:
        radius_range (tuple[float, float]): (min, max) blur radius in pixels (PIL's
            ``GaussianBlur`` radius, i.e. the standard deviation). Defaults to (0.1, 2.0).
        prob (float): Probability of blurring. Defaults to 0.5.
    """

    def __init__(self, radius_range: Tuple[float, float] = (0.1, 2.0), prob: float = 0.5) -> None:
        if len(radius_range) != 2 or not 0 <= radius_range[0] <= radius_range[1]:
            raise ValueError(f'radius_range must be (min, max) with 0 <= min <= max, '
                             f'got {radius_range}')
        if not 0.0 <= prob <= 1.0:
            raise ValueError(f'prob must be in [0, 1], got {prob}')
        self.radius_range = tuple(radius_range)
        self.prob = prob

    @cache_randomness
    def _sample_radius(self):
        """The radius to blur with, or None to leave the image unchanged."""
        if np.random.rand() >= self.prob:
            return None
        return float(np.random.uniform(*self.radius_range))

    def transform(self, results: Dict) -> Dict:
        radius = self._sample_radius()
        if radius is not None:
            img = results['img']
            blurred = Image.fromarray(img).filter(ImageFilter.GaussianBlur(radius=radius))
            results['img'] = np.array(blurred, dtype=img.dtype)
        return results

    def __repr__(self) -> str:
        return f'{self.__class__.__name__}(radius_range={self.radius_range}, prob={self.prob})'
