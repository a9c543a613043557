from dinomamba_mm.lazy_exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    'DinoVim': '.dinovim',
    'DinoMambaReg': '.dinovim',
    'FrozenBackbone': '.frozen_backbone',
    'LinearViT': '.linear_vit',
})
