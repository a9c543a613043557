from .linear_probe_neck import LinearProbeNeck

__all__ = ['LinearProbeNeck']
