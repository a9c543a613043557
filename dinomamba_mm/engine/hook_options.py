"""Refuse unknown options of a hook when it is built, not when it first uses them."""
import difflib
import functools
import inspect
from typing import List, Type

from mmengine.hooks import CheckpointHook


def accepted_options(cls: Type) -> List[str]:
    """The keyword arguments ``cls(...)`` accepts: those its ``__init__`` names, and, where it
    passes ``**kwargs`` on, those of the first base class in the MRO that defines ``__init__``
    (mmengine's ``CheckpointHook`` hands its ``**kwargs`` to ``Runner.save_checkpoint``, which
    takes none besides those the hook passes itself: they are not options)."""
    names: List[str] = []
    for klass in cls.__mro__:
        if klass is object or '__init__' not in vars(klass):
            continue
        init = inspect.unwrap(vars(klass)['__init__'])
        params = list(inspect.signature(init).parameters.values())[1:]
        names += [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                  and p.name not in names]
        if klass is CheckpointHook or not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return names


def checked_options(cls: Type) -> Type:
    """Class decorator: building ``cls`` with a keyword argument it does not accept is a
    TypeError naming the class, the option, the accepted ones and the closest of them.

    Python's own error for a class without ``**kwargs`` names neither the accepted options nor
    a close one, and a class passing ``**kwargs`` on (``CheckpointHook``) accepts anything until
    it uses them: a misspelt ``max_keep_ckpt`` failed at the first save, after an interval.
    """
    init = cls.__init__
    accepted = accepted_options(cls)

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        unknown = [key for key in kwargs if key not in accepted]
        if unknown:
            close = difflib.get_close_matches(unknown[0], accepted, n=1)
            raise TypeError(
                f'{cls.__name__} has no option {unknown[0]!r}'
                + (f' (did you mean {close[0]!r}?)' if close else '')
                + f'; its options are {accepted or "none"}')
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls
