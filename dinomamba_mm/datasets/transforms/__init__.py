from dinomamba_mm.lazy_exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    'DINOMultiCrop': '.dino_multi_crop',
    'LoadImageFromFile': '.load_image',
    'LoadSegAnnotations': '.load_seg_annotations',
    'RandomGaussianBlur': '.random_gaussian_blur',
})
