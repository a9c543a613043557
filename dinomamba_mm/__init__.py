"""dinomamba_mm: Vision Mamba (Mamba-2) backbones with DINO pretraining for OpenMMLab.

Importing this package registers every module in the 'dinomamba_mm' scope; that is what
``custom_imports=dict(imports=['dinomamba_mm'], allow_failed_imports=False)`` relies on.
"""
from . import compat

compat.apply_on_import()  # first: mmengine meets the fixes before any of our code runs

from . import analysis, datasets, engine, evaluation, model_zoo, models, ops  # noqa: E402,F401
from .version import __version__, version_info  # noqa: E402

__all__ = ['__version__', 'version_info']
