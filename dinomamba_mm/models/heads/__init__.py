from .dino_loss_head import DINOLossHead
from .dino_projection_head import DINOProjectionHead
from .linear_seg_head import LinearSegHead

__all__ = ['DINOLossHead', 'DINOProjectionHead', 'LinearSegHead']
