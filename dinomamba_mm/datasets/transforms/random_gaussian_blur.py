"""Gaussian blur with a radius drawn per image (DINO / BYOL augmentation)."""
import math
from typing import Tuple

from mmpretrain.datasets.transforms import GaussianBlur

from dinomamba_mm.argument_checks import check_argument, check_number, is_real_sequence
from dinomamba_mm.registry import TRANSFORMS


@TRANSFORMS.register_module()
class RandomGaussianBlur(GaussianBlur):
    """With probability ``prob``, blur ``results['img']`` with a radius ~ U(radius_range).

    mmpretrain's ``GaussianBlur`` with ``magnitude_range=radius_range`` and
    ``magnitude_std='inf'`` (its uniform draw), under DINO's argument names and with their
    values checked. Randomness comes from ``np.random`` (seeded by mmengine per process and per
    dataloader worker).

    Required / modified key: ``img`` (H, W, C) or (H, W) uint8 array.

    Args:
        radius_range (tuple[float, float]): (min, max) blur radius in pixels (PIL's
            ``GaussianBlur`` radius, i.e. the standard deviation). Defaults to (0.1, 2.0).
        prob (float): Probability of blurring. Defaults to 0.5.
    """

    def __init__(self, radius_range: Tuple[float, float] = (0.1, 2.0), prob: float = 0.5) -> None:
        check_argument('radius_range', radius_range,
                       'a (min, max) pair with 0 <= min <= max < inf', is_real_sequence,
                       lambda v: len(v) == 2 and 0 <= v[0] <= v[1] < math.inf)
        check_number('prob', prob, 0, 1)
        super().__init__(magnitude_range=tuple(radius_range), magnitude_std='inf', prob=prob)
        self.radius_range = tuple(radius_range)

    def __repr__(self) -> str:
        return f'{self.__class__.__name__}(radius_range={self.radius_range}, prob={self.prob})'
