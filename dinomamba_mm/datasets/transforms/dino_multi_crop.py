"""DINO's multi-crop augmentation: global crops (teacher and student), local crops (student)."""
from typing import Optional, Sequence, Tuple

from mmcv.transforms import RandomApply, RandomFlip, RandomGrayscale
from mmpretrain.datasets.transforms import MultiView, RandomResizedCrop, Solarize

from dinomamba_mm.registry import TRANSFORMS
from .random_gaussian_blur import RandomGaussianBlur
from .wrapping_hue_color_jitter import WrappingHueColorJitter


@TRANSFORMS.register_module()
class DINOMultiCrop(MultiView):
    """Turn ``results['img']`` into a list of ``num_global_crops + num_local_crops`` crops.

    Every crop: ``RandomResizedCrop`` (bicubic, PIL) -> horizontal flip (``flip_prob``) ->
    colour jitter (``color_jitter``: :class:`WrappingHueColorJitter` arguments, applied with
    ``color_jitter_prob``) -> grayscale
    (``grayscale_prob``, luma weights on BGR) -> :class:`RandomGaussianBlur`
    (``blur_radius_range``). Per crop type, as in DINO:

    - global crop 1: ``global_crop_size``, scale ``global_crop_scale``, blur prob
      ``global_blur_probs[0]`` (1.0);
    - global crops 2..: blur prob ``global_blur_probs[1]`` (0.1), then ``Solarize``
      (threshold ``solarize_thr``) with ``solarize_prob`` (0.2);
    - local crops: ``local_crop_size``, scale ``local_crop_scale``, blur prob
      ``local_blur_prob`` (0.5).

    Global crops come first, the order :class:`dinomamba_mm.DINO` expects. Built from
    mmpretrain / mmcv transforms (``RandomResizedCrop``, ``RandomFlip``, ``RandomApply``,
    ``RandomGrayscale``, ``Solarize``, ``MultiView``) plus our :class:`WrappingHueColorJitter`
    and :class:`RandomGaussianBlur` (mmpretrain's versions fail on numpy >= 2 / cannot draw
    the radius from (0.1, 2.0)); all draw from
    ``np.random`` / ``random``, which mmengine seeds (``randomness.seed``, per worker).

    Expects a BGR uint8 image (``LoadImageFromFile``); follow with ``PackInputs`` and use
    ``default_collate``, so the model receives a list of (B, 3, H_c, W_c) tensors.
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
        if not isinstance(num_global_crops, int) or num_global_crops < 1:
            raise ValueError(f'num_global_crops must be an int >= 1, got {num_global_crops!r}')
        if not isinstance(num_local_crops, int) or num_local_crops < 0:
            raise ValueError(f'num_local_crops must be an int >= 0, got {num_local_crops!r}')
        if len(global_blur_probs) != 2:
            raise ValueError('global_blur_probs must be (first global crop, other global '
                             f'crops), got {global_blur_probs}')
        if color_jitter is None:
            color_jitter = dict(brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1)

        def view(size, scale, blur_prob, solarize):
            pipeline = [
                RandomResizedCrop(scale=size, crop_ratio_range=scale,
                                  interpolation=interpolation, backend=backend),
                RandomFlip(prob=flip_prob, direction='horizontal'),
                RandomApply(transforms=[WrappingHueColorJitter(**color_jitter)],
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
