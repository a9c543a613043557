from dinomamba_mm.lazy_exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    'BinaryAUC': '.binary_auc',
    'label_map': '.binary_auc',
    'maps_at_label_size': '.binary_auc',
    'ClassSubsetAccuracy': '.class_subset_accuracy',
    'ReaLAccuracy': '.real_accuracy',
})
