"""Constructor-argument checks: TypeError for a wrong type, ValueError for a wrong value, both
naming the argument, what was expected and the value given."""
import math
from argparse import Namespace
from collections.abc import Sequence
from numbers import Integral, Real
from typing import Any, Callable, Dict, List, Optional


def is_int(value: Any) -> bool:
    """An integer, bools excluded."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """A real number, bools excluded."""
    return isinstance(value, Real) and not isinstance(value, bool)


def is_bool(value: Any) -> bool:
    """``True`` or ``False`` (a str such as 'False', an int or None is not one)."""
    return isinstance(value, bool)


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


def check_bool(name: str, value: Any) -> None:
    """TypeError "``name`` must be a bool (True or False), got ``repr(value)``" unless ``value``
    is a bool: 'False' is truthy and 0 / 1 / None are not flags."""
    check_argument(name, value, 'a bool (True or False)', is_bool)


def check_choice(name: str, value: Any, choices: Sequence) -> None:
    """ValueError "``name`` must be one of ``choices``, got ``repr(value)``" unless value is one
    (a bool matches only a bool choice: ``True == 1`` in Python)."""
    if not any(value == choice and is_bool(value) == is_bool(choice) for choice in choices):
        raise ValueError(f'{name} must be one of {choices}, got {value!r}')


def check_int(name: str, value: Any, minimum: Optional[int] = None,
              maximum: Optional[int] = None) -> None:
    """:func:`check_argument` for an integer (bools excluded) in ``[minimum, maximum]``.

    The expected part reads "an int >= minimum", "an int <= maximum" or "an int in
    [minimum, maximum]".
    """
    if minimum is not None and maximum is not None:
        expected = f'an int in [{minimum}, {maximum}]'
    elif minimum is not None:
        expected = f'an int >= {minimum}'
    elif maximum is not None:
        expected = f'an int <= {maximum}'
    else:
        expected = 'an int'
    check_argument(name, value, expected, is_int,
                   lambda v: (minimum is None or v >= minimum)
                   and (maximum is None or v <= maximum))


def check_int_options(args: Namespace, minimums: Dict[str, int]) -> None:
    """:func:`check_int` for the given (not None) int options of a command line, each named as
    typed (``block_size`` -> ``--block-size``), against its minimum in ``minimums``."""
    for dest, minimum in minimums.items():
        if getattr(args, dest) is not None:
            check_int('--' + dest.replace('_', '-'), getattr(args, dest), minimum)


def check_number(name: str, value: Any, minimum: Optional[float] = None,
                 maximum: Optional[float] = None, exclusive_minimum: bool = False,
                 exclusive_maximum: bool = False, allow_inf: bool = False) -> None:
    """:func:`check_argument` for a real number (not NaN) in a range, ``minimum`` /
    ``maximum`` excluded when ``exclusive_minimum`` / ``exclusive_maximum``.

    An unbounded side is open: the number must be finite there unless ``allow_inf`` (for the
    arguments where an infinity means "no limit"). The expected part reads e.g. "a number in
    (0, inf)", or "(0, inf]" with ``allow_inf``.
    """
    low = '-inf' if minimum is None else minimum
    high = 'inf' if maximum is None else maximum
    opens = '[' if minimum is None and allow_inf or minimum is not None and \
        not exclusive_minimum else '('
    closes = ']' if maximum is None and allow_inf or maximum is not None and \
        not exclusive_maximum else ')'
    expected = f'a number in {opens}{low}, {high}{closes}'

    def in_range(v) -> bool:
        above = minimum is None or (v > minimum if exclusive_minimum else v >= minimum)
        below = maximum is None or (v < maximum if exclusive_maximum else v <= maximum)
        return above and below and (allow_inf or math.isfinite(v))

    check_argument(name, value, expected, lambda v: is_real(v) and not math.isnan(v), in_range)


def check_indices(name: str, value: Any, length: int) -> List[int]:
    """Check an int or a sequence of ints indexing ``length`` items (negative ones count from
    the end, as in Python) and return them as non-negative indices, in the given order.

    Raises:
        TypeError: not an int or a sequence of ints (a str is not one).
        ValueError: an index outside [-length, length), no index, or one item named twice.
    """
    indices = [value] if is_int(value) else value
    expected = f'an int or a sequence of ints in [-{length}, {length})'
    if isinstance(indices, (str, bytes)) or not isinstance(indices, Sequence) \
            or not all(is_int(i) for i in indices):
        raise TypeError(f'{name} must be {expected}, got {value!r}')
    if not all(-length <= i < length for i in indices):
        raise ValueError(f'{name} must be {expected}, got {value!r}')
    if not indices:
        raise ValueError(f'{name} must hold at least one index, got {value!r}')
    result = [int(i) % length for i in indices]
    if len(set(result)) < len(result):
        raise ValueError(f'{name} must not repeat an index (negative ones count from the end '
                         f'of {length}), got {value!r}')
    return result
