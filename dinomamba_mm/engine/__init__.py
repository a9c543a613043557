from .hooks import *  # noqa: F401,F403
from .optimizers import *  # noqa: F401,F403
