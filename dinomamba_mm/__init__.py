"""dinomamba_mm: Vision Mamba (Mamba-2) backbones with DINO pretraining for OpenMMLab.

Importing this package (what ``custom_imports=dict(imports=['dinomamba_mm'],
allow_failed_imports=False)`` does) adds the 'dinomamba_mm' scope to mmengine's registries and
applies the compatibility fixes mmengine needs first (:mod:`dinomamba_mm.compat`); a class is
imported when a config looks it up (:mod:`dinomamba_mm.registry`), so that a config imports only
what it uses.
"""
from . import checkpoints, compat, registry  # noqa: F401  (checkpoints: the file loaders)
from .lazy_exports import lazy_exports
from .version import __version__, version_info

compat.apply_on_import()

__getattr__, _ = lazy_exports(
    __name__, {},
    submodules=('analysis', 'checkpoints', 'datasets', 'engine', 'evaluation', 'models',
                'ops'))
__all__ = ['__version__', 'version_info']
