"""dinomamba_mm: Vision Mamba (Mamba-2) backbones with DINO pretraining for OpenMMLab.

Importing this package (what ``custom_imports=dict(imports=['dinomamba_mm'],
allow_failed_imports=False)`` does) adds the 'dinomamba_mm' scope to mmengine's registries and
applies the two fixes mmengine needs before any of our code runs (:mod:`dinomamba_mm.compat`);
it changes no other package's functions. The modules that register classes are imported at the
first lookup in each registry (:mod:`dinomamba_mm.registry`), mmcv with them.

Without mmengine installed (torch and triton alone) there is no registry to fill, and the SSD
op :mod:`dinomamba_mm.ops.ssd`, which needs nothing of OpenMMLab, imports as well.
"""
from importlib.util import find_spec

from .version import __version__, version_info

if find_spec('mmengine') is not None:
    from . import compat, registry  # noqa: F401

    compat.apply_on_import()

__all__ = ['__version__', 'version_info']
