"""dinomamba_mm: Vision Mamba (Mamba-2) backbones with DINO pretraining for OpenMMLab.

Importing this package registers every module in the 'dinomamba_mm' scope; that is what
``custom_imports=dict(imports=['dinomamba_mm'], allow_failed_imports=False)`` relies on.
"""
from . import compat  # noqa: F401  (first: patches checkpoint loading on torch >= 2.6)
from . import (analysis, checkpoints, datasets, engine, evaluation, model_zoo,  # noqa: F401
               models, ops)
from .version import __version__, version_info

__all__ = ['__version__', 'version_info']
