from .color_jitter import HueSafeColorJitter
from .dino_multi_crop import DINOMultiCrop
from .load_image import LoadImageFromFile
from .load_seg_annotations import LoadSegAnnotations
from .random_gaussian_blur import RandomGaussianBlur

__all__ = ['DINOMultiCrop', 'HueSafeColorJitter', 'LoadImageFromFile', 'LoadSegAnnotations',
           'RandomGaussianBlur']
