from .dino_multi_crop import DINOMultiCrop
from .random_gaussian_blur import RandomGaussianBlur
from .wrapping_hue_color_jitter import WrappingHueColorJitter, shift_hue

__all__ = ['DINOMultiCrop', 'RandomGaussianBlur', 'WrappingHueColorJitter', 'shift_hue']
