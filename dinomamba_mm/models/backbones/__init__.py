from .dinovim import DinoMambaReg, DinoVim
from .frozen_backbone import FrozenBackbone
from .linear_vit import LinearViT

__all__ = ['DinoVim', 'DinoMambaReg', 'FrozenBackbone', 'LinearViT']
