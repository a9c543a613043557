from . import hooks, optimizers  # noqa: F401
