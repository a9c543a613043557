from dinomamba_mm.lazy_exports import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    'LayerDecayOptimWrapperConstructor': '.layer_decay_optim_wrapper_constructor',
    'TrainableOptimWrapperConstructor': '.trainable_optim_wrapper_constructor',
})
