"""SSD (Mamba-2) scan.

api.py is the public API (one direction, or K directions stacked); scan_inputs.py the container
it hands a backend; naive.py the float64 sequential oracle and reference.py the chunked
algorithm as a short einsum listing; chunk.py / chunk_stages.py the PyTorch path (CPU) and
triton_chunk.py / triton_kernels.py the Triton path (GPU), written in the same stages.
"""
from .api import export_decompositions, ssd_mixing_matrix, ssd_scan, ssd_scan_directions

__all__ = ['ssd_scan', 'ssd_scan_directions', 'ssd_mixing_matrix', 'export_decompositions']
