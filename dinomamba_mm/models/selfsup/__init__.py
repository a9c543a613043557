from .dino import DINO

__all__ = ['DINO']
