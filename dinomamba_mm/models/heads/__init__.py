from .dino_loss_head import DINOLossHead
from .dino_projection_head import DINOProjectionHead

__all__ = ['DINOLossHead', 'DINOProjectionHead']
