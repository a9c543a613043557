from .coco_dataset import CocoDataset
from .precomputed_feature_dataset import (PrecomputedFeatureDataset,
                                          save_precomputed_features)
from .transforms import *  # noqa: F401,F403
from .worker_seed import seed_worker_from_loader

__all__ = ['CocoDataset', 'PrecomputedFeatureDataset', 'save_precomputed_features',
           'seed_worker_from_loader']
