from dinomamba_mm.lazy_exports import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__, {'seed_worker_from_loader': '.worker_seed'}, submodules=('transforms', ))
