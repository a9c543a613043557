from .binary_auc import (auc_from_histograms, binary_auc, binary_auc_histograms,
                         roc_from_histograms)

__all__ = ['binary_auc', 'binary_auc_histograms', 'auc_from_histograms',
           'roc_from_histograms']
