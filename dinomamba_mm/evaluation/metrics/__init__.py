from .binary_auc import BinaryAUC

__all__ = ['BinaryAUC']
