from .backbones import *  # noqa: F401,F403
from .classifiers import *  # noqa: F401,F403
from .heads import *  # noqa: F401,F403
from .layers import *  # noqa: F401,F403
from .necks import *  # noqa: F401,F403
from .selfsup import *  # noqa: F401,F403
