from .coco_dataset import CocoDataset
from .transforms import *  # noqa: F401,F403

__all__ = ['CocoDataset']
