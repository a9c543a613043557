"""Public names of a package imported on first use (PEP 562), so that importing a package does
not import every dependency of its submodules (e.g. the mmpretrain model zoo that ``DINO`` and
``LinearViT`` subclass, whose package imports mmdet)."""
import sys
from importlib import import_module
from typing import Any, Callable, Dict, List, Sequence, Tuple


def lazy_exports(package: str, exports: Dict[str, str],
                 submodules: Sequence[str] = ()) -> Tuple[Callable[[str], Any], List[str]]:
    """A package's ``__getattr__`` and ``__all__`` for names defined in its submodules.

    Usage, in ``package/__init__.py``::

        __getattr__, __all__ = lazy_exports(__name__, {'DinoVim': '.dinovim'})

    ``from package import DinoVim`` then imports ``package.dinovim`` and nothing else. A name
    must not be the name of a submodule of ``package``: importing the submodule binds the name
    to the module.

    Args:
        package (str): The package's ``__name__``.
        exports (dict): ``{public name: submodule}``, submodules relative to ``package``.
        submodules (Sequence[str]): Submodules that ``package.name`` imports on access.
            Defaults to none.

    Returns:
        tuple: ``(__getattr__, __all__)``.
    """
    clashes = sorted(name for name, module in exports.items() if module.lstrip('.') == name)
    if clashes:
        raise ValueError(f'{package}: exported names {clashes} are also submodule names')

    def __getattr__(name: str) -> Any:
        if name in submodules:
            return import_module(f'.{name}', package)
        if name not in exports:
            raise AttributeError(f'module {package!r} has no attribute {name!r}')
        value = getattr(import_module(exports[name], package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__, list(exports)
