from .layer_decay_optim_wrapper_constructor import LayerDecayOptimWrapperConstructor

__all__ = ['LayerDecayOptimWrapperConstructor']
