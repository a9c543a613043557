from dinomamba_mm.lazy_exports import lazy_exports

__getattr__, _ = lazy_exports(__name__, {}, submodules=('hooks', 'optimizers'))
