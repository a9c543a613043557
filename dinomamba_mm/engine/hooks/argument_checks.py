"""Constructor-argument checks shared by the DINO schedule hooks."""
import math
from numbers import Real
from typing import Optional


def check_number(name: str, value, minimum: Optional[float] = None,
                 maximum: Optional[float] = None, exclusive_minimum: bool = False) -> None:
    """Raise TypeError unless ``value`` is a real number (not a bool), ValueError unless it lies
    in the range (``minimum`` excluded when ``exclusive_minimum``); both name ``name``."""
    low = '-inf' if minimum is None else minimum
    high = 'inf' if maximum is None else maximum
    expected = f"a number in {'(' if exclusive_minimum else '['}{low}, {high}]"
    if not isinstance(value, Real) or isinstance(value, bool) or math.isnan(value):
        raise TypeError(f'{name} must be {expected}, got {value!r}')
    too_low = minimum is not None and (value <= minimum if exclusive_minimum else value < minimum)
    if too_low or (maximum is not None and value > maximum):
        raise ValueError(f'{name} must be {expected}, got {value!r}')
