"""SSD (Mamba-2) scan: public API in api.py, float64 oracle in naive.py, CPU path in chunk.py."""
from .api import ssd_mixing_matrix, ssd_scan, ssd_scan_bidirectional

__all__ = ['ssd_scan', 'ssd_scan_bidirectional', 'ssd_mixing_matrix']
