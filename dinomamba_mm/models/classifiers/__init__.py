from .linear_probe_classifier import LinearProbeClassifier

__all__ = ['LinearProbeClassifier']
