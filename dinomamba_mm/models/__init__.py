from . import backbones, classifiers, heads, layers, necks, selfsup  # noqa: F401
