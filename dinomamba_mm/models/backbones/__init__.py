from .dinovim import DinoMambaReg, DinoVim
from .frozen_backbone import FrozenBackbone
from .linear_vit import LinearViT
from .precomputed_features import PrecomputedFeatures

__all__ = ['DinoVim', 'DinoMambaReg', 'FrozenBackbone', 'LinearViT', 'PrecomputedFeatures']
