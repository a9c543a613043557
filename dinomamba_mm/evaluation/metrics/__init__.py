from .binary_auc import BinaryAUC, label_map, maps_at_label_size
from .class_subset_accuracy import ClassSubsetAccuracy
from .real_accuracy import ReaLAccuracy

__all__ = ['BinaryAUC', 'label_map', 'maps_at_label_size', 'ClassSubsetAccuracy',
           'ReaLAccuracy']
