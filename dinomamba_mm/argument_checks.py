"""Constructor-argument checks: TypeError for a wrong type, ValueError for a wrong value, both
naming the argument, what was expected and the value given."""
import math
from numbers import Integral, Real
from typing import Any, Callable, Optional


def is_int(value: Any) -> bool:
    """An integer, bools excluded."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """A real number, bools excluded."""
    return isinstance(value, Real) and not isinstance(value, bool)


def is_real_sequence(value: Any) -> bool:
    """A tuple or list of real numbers."""
    return isinstance(value, (tuple, list)) and all(is_real(v) for v in value)


def check_argument(name: str, value: Any, expected: str, is_type: Callable[[Any], bool],
                   is_valid: Optional[Callable[[Any], bool]] = None) -> None:
    """Raise TypeError unless ``is_type(value)``, then ValueError unless ``is_valid(value)``.

    Both messages read "``name`` must be ``expected``, got ``repr(value)``".
    """
    if not is_type(value):
        raise TypeError(f'{name} must be {expected}, got {value!r}')
    if is_valid is not None and not is_valid(value):
        raise ValueError(f'{name} must be {expected}, got {value!r}')


def check_number(name: str, value: Any, minimum: Optional[float] = None,
                 maximum: Optional[float] = None, exclusive_minimum: bool = False) -> None:
    """:func:`check_argument` for a real number (not NaN) in a range, ``minimum`` excluded
    when ``exclusive_minimum``."""
    low = '-inf' if minimum is None else minimum
    high = 'inf' if maximum is None else maximum
    expected = f"a number in {'(' if exclusive_minimum else '['}{low}, {high}]"

    def in_range(v) -> bool:
        above = minimum is None or (v > minimum if exclusive_minimum else v >= minimum)
        return above and (maximum is None or v <= maximum)

    check_argument(name, value, expected, lambda v: is_real(v) and not math.isnan(v), in_range)
