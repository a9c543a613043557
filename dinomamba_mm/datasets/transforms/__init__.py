from .dino_multi_crop import DINOMultiCrop
from .random_gaussian_blur import RandomGaussianBlur

__all__ = ['DINOMultiCrop', 'RandomGaussianBlur']
