from .linear_probe_neck import LinearProbeNeck  # noqa: F401
