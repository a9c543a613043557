from . import backbones, heads, layers, necks, selfsup  # noqa: F401
