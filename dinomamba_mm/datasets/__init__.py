from .coco_dataset import CocoDataset
from .transforms import *  # noqa: F401,F403
from .worker_seed import seed_worker_from_loader

__all__ = ['CocoDataset', 'seed_worker_from_loader']
