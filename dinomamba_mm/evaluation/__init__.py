from .functional import (auc_from_histograms, binary_auc, binary_auc_histograms,
                         roc_from_histograms)
from .metrics import BinaryAUC, ClassSubsetAccuracy, ReaLAccuracy

__all__ = ['binary_auc', 'binary_auc_histograms', 'auc_from_histograms',
           'roc_from_histograms', 'BinaryAUC', 'ClassSubsetAccuracy', 'ReaLAccuracy']
