"""dinomamba_mm: Vision Mamba (Mamba-2) backbones with DINO pretraining for OpenMMLab.

Importing this package (what ``custom_imports=dict(imports=['dinomamba_mm'],
allow_failed_imports=False)`` does) adds the 'dinomamba_mm' scope to mmengine's registries and
applies the compatibility fixes mmengine needs first (:mod:`dinomamba_mm.compat`); the modules
that register classes are imported at the first lookup in each registry
(:mod:`dinomamba_mm.registry`).
"""
from . import checkpoints, compat, registry  # noqa: F401  (checkpoints: the file loaders)
from .version import __version__, version_info

compat.apply_on_import()

__all__ = ['__version__', 'version_info']
