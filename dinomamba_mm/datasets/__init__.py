from .transforms import *  # noqa: F401,F403
from .worker_seed import seed_worker_from_loader

__all__ = ['seed_worker_from_loader']
