from dinomamba_mm.lazy_exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    'DINOMultiCrop': '.dino_multi_crop',
    'RandomGaussianBlur': '.random_gaussian_blur',
})
