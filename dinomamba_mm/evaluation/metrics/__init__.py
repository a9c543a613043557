from .binary_auc import BinaryAUC, label_map, maps_at_label_size

__all__ = ['BinaryAUC', 'label_map', 'maps_at_label_size']
