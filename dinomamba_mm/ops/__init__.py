"""Custom operators: the SSD scan."""
from . import ssd  # noqa: F401
from .ssd import ssd_mixing_matrix, ssd_scan, ssd_scan_directions

__all__ = ['ssd_scan', 'ssd_scan_directions', 'ssd_mixing_matrix']
