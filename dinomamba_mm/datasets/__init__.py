from .coco_dataset import CocoDataset
from .precomputed_feature_dataset import (PrecomputedFeatureDataset,
                                          save_precomputed_features)
from .transforms import *  # noqa: F401,F403

__all__ = ['CocoDataset', 'PrecomputedFeatureDataset', 'save_precomputed_features']
