"""DINO's multi-crop augmentation: global crops (teacher and student), local crops (student)."""
import math
from collections.abc import Mapping
from typing import Optional, Sequence, Tuple

from mmcv.transforms import RandomApply, RandomFlip, RandomGrayscale
from mmpretrain.datasets.transforms import (ColorJitter, MultiView, RandomResizedCrop,
                                            Solarize)

from dinomamba_mm.argument_checks import check_argument as check
from dinomamba_mm.argument_checks import is_int, is_real, is_real_sequence
from dinomamba_mm.registry import TRANSFORMS
from .color_jitter import HueSafeColorJitter
from .random_gaussian_blur import RandomGaussianBlur

# Resize interpolations each backend can run (RandomResizedCrop accepts the cv2 set; PIL has no
# 'area', which would otherwise fail only on the first image).
_INTERPOLATIONS = {
    'cv2': ('nearest', 'bilinear', 'bicubic', 'area', 'lanczos'),
    'pillow': ('nearest', 'bilinear', 'bicubic', 'lanczos'),
}


@TRANSFORMS.register_module()
class DINOMultiCrop(MultiView):
    """Turn ``results['img']`` into a list of ``num_global_crops + num_local_crops`` crops.

    Every crop: ``RandomResizedCrop`` -> horizontal flip -> colour jitter (applied with
    ``color_jitter_prob``) -> grayscale -> :class:`RandomGaussianBlur`. Per crop type, as in
    DINO: global crop 1 blurs with ``global_blur_probs[0]`` (1.0); global crops 2.. blur with
    ``global_blur_probs[1]`` (0.1), then ``Solarize`` with ``solarize_prob`` (0.2); local
    crops blur with ``local_blur_prob`` (0.5). Global crops come first, the order
    :class:`dinomamba_mm.DINO` expects.

    Built from mmpretrain / mmcv transforms (``RandomResizedCrop``, ``RandomFlip``,
    ``RandomApply``, ``ColorJitter``, ``RandomGrayscale``, ``Solarize``, ``MultiView``) and
    :class:`RandomGaussianBlur` (mmpretrain's ``GaussianBlur`` with DINO's arguments); the
    colour jitter is :class:`HueSafeColorJitter` (mmpretrain's, its hue step numpy-2-safe). All
    draw from ``np.random`` / ``random``, which mmengine seeds (``randomness.seed``, per
    dataloader worker).

    Expects a BGR uint8 image (``LoadImageFromFile``); follow with ``PackInputs`` and use
    ``default_collate``, so the model receives a list of (B, 3, H_c, W_c) tensors.

    Every probability argument lies in [0, 1] (an int 0 or 1 is accepted); a pair is a
    tuple or list of two numbers. All arguments are checked on construction.

    Args:
        num_global_crops (int): Global (teacher and student) crops, >= 1. Defaults to 2.
        num_local_crops (int): Local (student only) crops, >= 0. Defaults to 8.
        global_crop_size (int): Side of the global crops, >= 1. Defaults to 224.
        local_crop_size (int): Side of the local crops, >= 1. Defaults to 96.
        global_crop_scale (tuple): (min, max) area range of global crops (fraction of the
            image), 0 < min <= max <= 1. Defaults to (0.4, 1.0).
        local_crop_scale (tuple): (min, max) area range of local crops, as above. Defaults to
            (0.05, 0.4).
        flip_prob (float): Horizontal flip probability. Defaults to 0.5.
        color_jitter (dict, optional): mmpretrain ``ColorJitter`` arguments. Defaults to
            ``dict(brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1)``.
        color_jitter_prob (float): Probability of the colour jitter. Defaults to 0.8.
        grayscale_prob (float): Grayscale probability (luma weights on BGR). Defaults to 0.2.
        blur_radius_range (tuple): (min, max) blur radius, 0 <= min <= max < inf. Defaults
            to (0.1, 2.0).
        global_blur_probs (Sequence[float]): Blur probability of global crop 1 and of the
            other global crops. Defaults to (1.0, 0.1).
        local_blur_prob (float): Blur probability of local crops. Defaults to 0.5.
        solarize_prob (float): Solarisation probability of global crops 2... Defaults to 0.2.
        solarize_thr (float): Pixels >= this are inverted, in [0, 256]. Defaults to 128.
        interpolation (str): Resize interpolation of the crops: 'nearest', 'bilinear',
            'bicubic', 'lanczos', or with ``backend='cv2'`` also 'area'. Defaults to 'bicubic'.
        backend (str): Resize backend, 'pillow' or 'cv2'. Defaults to 'pillow' (as
            torchvision / DINO).

    Raises:
        TypeError: naming the argument and its value, when it has the wrong type (e.g. a
            string or bool for a number, a float count, a scalar for a pair, a non-dict
            ``color_jitter``), or ``color_jitter`` holds a key or value type ``ColorJitter``
            rejects.
        ValueError: naming the argument and its value, when it is outside the range given
            above (a pair of the wrong length included), or ``color_jitter`` holds a value
            ``ColorJitter`` rejects.
    """

    def __init__(self,
                 num_global_crops: int = 2,
                 num_local_crops: int = 8,
                 global_crop_size: int = 224,
                 local_crop_size: int = 96,
                 global_crop_scale: Tuple[float, float] = (0.4, 1.0),
                 local_crop_scale: Tuple[float, float] = (0.05, 0.4),
                 flip_prob: float = 0.5,
                 color_jitter: Optional[dict] = None,
                 color_jitter_prob: float = 0.8,
                 grayscale_prob: float = 0.2,
                 blur_radius_range: Tuple[float, float] = (0.1, 2.0),
                 global_blur_probs: Sequence[float] = (1.0, 0.1),
                 local_blur_prob: float = 0.5,
                 solarize_prob: float = 0.2,
                 solarize_thr: float = 128,
                 interpolation: str = 'bicubic',
                 backend: str = 'pillow') -> None:
        # Everything is checked here, so a bad config fails when it is built, naming our
        # argument rather than the mmpretrain / mmcv one it feeds.
        check('num_global_crops', num_global_crops, 'an int >= 1', is_int, lambda v: v >= 1)
        check('num_local_crops', num_local_crops, 'an int >= 0', is_int, lambda v: v >= 0)
        for name, size in (('global_crop_size', global_crop_size),
                           ('local_crop_size', local_crop_size)):
            check(name, size, 'an int >= 1', is_int, lambda v: v >= 1)
        for name, scale in (('global_crop_scale', global_crop_scale),
                            ('local_crop_scale', local_crop_scale)):
            check(name, scale, 'a (min, max) pair with 0 < min <= max <= 1', is_real_sequence,
                  lambda v: len(v) == 2 and 0 < v[0] <= v[1] <= 1)
        for name, prob in (('flip_prob', flip_prob), ('color_jitter_prob', color_jitter_prob),
                           ('grayscale_prob', grayscale_prob),
                           ('local_blur_prob', local_blur_prob),
                           ('solarize_prob', solarize_prob)):
            check(name, prob, 'a probability in [0, 1]', is_real, lambda v: 0 <= v <= 1)
        check('global_blur_probs', global_blur_probs,
              'a (first global crop, other global crops) pair of probabilities in [0, 1]',
              is_real_sequence, lambda v: len(v) == 2 and all(0 <= p <= 1 for p in v))
        check('blur_radius_range', blur_radius_range,
              'a (min, max) pair with 0 <= min <= max < inf', is_real_sequence,
              lambda v: len(v) == 2 and 0 <= v[0] <= v[1] < math.inf)
        check('solarize_thr', solarize_thr, 'a number in [0, 256]', is_real,
              lambda v: 0 <= v <= 256)
        check('backend', backend, f'one of {tuple(_INTERPOLATIONS)}',
              lambda v: isinstance(v, str), lambda v: v in _INTERPOLATIONS)
        check('interpolation', interpolation,
              f'one of {_INTERPOLATIONS[backend]} with backend {backend!r}',
              lambda v: isinstance(v, str), lambda v: v in _INTERPOLATIONS[backend])
        check('color_jitter', color_jitter, 'None or a dict of mmpretrain ColorJitter arguments',
              lambda v: v is None or isinstance(v, Mapping))
        if color_jitter is None:
            color_jitter = dict(brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1)
        try:  # ColorJitter checks its own arguments; say which of ours they came from
            ColorJitter(**color_jitter)
        except (TypeError, ValueError) as e:
            raise type(e)(f'color_jitter must be a dict of valid mmpretrain ColorJitter '
                          f'arguments, got {color_jitter!r}: {e}') from e

        def view(size, scale, blur_prob, solarize):
            pipeline = [
                RandomResizedCrop(scale=size, crop_ratio_range=scale,
                                  interpolation=interpolation, backend=backend),
                RandomFlip(prob=float(flip_prob), direction='horizontal'),  # mmcv: float only
                RandomApply(transforms=[HueSafeColorJitter(**color_jitter)],
                            prob=color_jitter_prob),
                RandomGrayscale(prob=grayscale_prob, keep_channels=True,
                                channel_weights=(0.114, 0.587, 0.299)),
                RandomGaussianBlur(radius_range=blur_radius_range, prob=blur_prob),
            ]
            if solarize:
                pipeline.append(Solarize(thr=solarize_thr, prob=solarize_prob))
            return pipeline

        super().__init__(
            transforms=[
                view(global_crop_size, global_crop_scale, global_blur_probs[0], False),
                view(global_crop_size, global_crop_scale, global_blur_probs[1], True),
                view(local_crop_size, local_crop_scale, local_blur_prob, False),
            ],
            num_views=[1, num_global_crops - 1, num_local_crops])
        self.num_global_crops = num_global_crops
        self.num_local_crops = num_local_crops
