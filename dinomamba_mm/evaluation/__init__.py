from dinomamba_mm.lazy_exports import lazy_exports
from .functional import (auc_from_histograms, binary_auc, binary_auc_histograms,
                         roc_from_histograms)

__getattr__, _ = lazy_exports(__name__, {}, submodules=('metrics', ))
__all__ = ['binary_auc', 'binary_auc_histograms', 'auc_from_histograms',
           'roc_from_histograms']
