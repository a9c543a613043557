"""DINO's multi-crop augmentation: global crops (teacher and student), local crops (student)."""
from typing import Optional, Sequence, Tuple

from mmcv.transforms import RandomApply, RandomFlip, RandomGrayscale
from mmpretrain.datasets.transforms import (ColorJitter, MultiView, RandomResizedCrop,
                                            Solarize)

from dinomamba_mm.registry import TRANSFORMS
from .random_gaussian_blur import RandomGaussianBlur


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
    ``RandomApply``, ``ColorJitter``, ``RandomGrayscale``, ``Solarize``, ``MultiView``) plus our
    :class:`RandomGaussianBlur` (mmpretrain's cannot draw the radius from (0.1, 2.0)); the hue
    jitter relies on dinomamba_mm.compat's numpy-2-safe ``mmcv.adjust_hue``. All draw from ``np.random`` /
    ``random``, which mmengine seeds (``randomness.seed``, per dataloader worker).

    Expects a BGR uint8 image (``LoadImageFromFile``); follow with ``PackInputs`` and use
    ``default_collate``, so the model receives a list of (B, 3, H_c, W_c) tensors.

    Args:
        num_global_crops (int): Global (teacher and student) crops, >= 1. Defaults to 2.
        num_local_crops (int): Local (student only) crops, >= 0. Defaults to 8.
        global_crop_size (int): Side of the global crops. Defaults to 224.
        local_crop_size (int): Side of the local crops. Defaults to 96.
        global_crop_scale (tuple): Area range of global crops (fraction of the image).
            Defaults to (0.4, 1.0).
        local_crop_scale (tuple): Area range of local crops. Defaults to (0.05, 0.4).
        flip_prob (float): Horizontal flip probability. Defaults to 0.5.
        color_jitter (dict, optional): mmpretrain ``ColorJitter`` arguments. Defaults to
            ``dict(brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1)``.
        color_jitter_prob (float): Probability of the colour jitter. Defaults to 0.8.
        grayscale_prob (float): Grayscale probability (luma weights on BGR). Defaults to 0.2.
        blur_radius_range (tuple): Blur radius range. Defaults to (0.1, 2.0).
        global_blur_probs (Sequence[float]): Blur probability of global crop 1 and of the
            other global crops. Defaults to (1.0, 0.1).
        local_blur_prob (float): Blur probability of local crops. Defaults to 0.5.
        solarize_prob (float): Solarisation probability of global crops 2... Defaults to 0.2.
        solarize_thr (float): Pixels >= this are inverted. Defaults to 128.
        interpolation (str): Resize interpolation of the crops. Defaults to 'bicubic'.
        backend (str): Resize backend. Defaults to 'pillow' (as torchvision / DINO).
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
                RandomApply(transforms=[ColorJitter(**color_jitter)],
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
