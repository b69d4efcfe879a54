"""Parameter checks shared by every memwall component.

Each check raises ``TypeError`` (wrong type: a float, a bool or a string where an integer belongs)
or ``ValueError`` (right type, value out of range), with a message naming the parameter, what is
allowed and the value given, for example ``Lane count must be a power of two between 1 and 64,
not 12``.
"""

from __future__ import annotations

import math
import numbers

__all__ = ["integer", "power_of_two", "one_of", "positive", "index_bits"]


def _is_int(value) -> bool:
    """A Python or NumPy integer (the golden models' parameters come from arrays), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def integer(value, what: str, minimum: int, maximum: int) -> int:
    """Return ``value`` as an ``int`` if it is an integer in ``[minimum, maximum]``."""
    if not _is_int(value):
        raise TypeError(f"{what} must be an integer between {minimum} and {maximum}, "
                        f"not {value!r}")
    if not minimum <= value <= maximum:
        raise ValueError(f"{what} must be between {minimum} and {maximum}, not {value}")
    return int(value)


def power_of_two(value, what: str, minimum: int = 1, maximum: int = 1 << 40) -> int:
    """Return ``log2(value)`` if ``value`` is a power of two in ``[minimum, maximum]``."""
    if not _is_int(value):
        raise TypeError(f"{what} must be an integer power of two between {minimum} and "
                        f"{maximum}, not {value!r}")
    if not minimum <= value <= maximum or value & (value - 1):
        raise ValueError(f"{what} must be a power of two between {minimum} and {maximum}, "
                         f"not {value}")
    return int(value).bit_length() - 1


def one_of(value, what: str, allowed: tuple[int, ...]) -> int:
    """Return ``value`` as an ``int`` if it is one of the integers ``allowed``."""
    listed = ", ".join(map(str, allowed[:-1])) + f" or {allowed[-1]}" if len(allowed) > 1 \
        else str(allowed[0])
    if not _is_int(value) or value not in allowed:
        error = ValueError if _is_int(value) else TypeError
        raise error(f"{what} must be {listed}, not {value!r}")
    return int(value)


def positive(value, what: str, unit: str | None = None) -> float:
    """Return ``value`` as a ``float`` if it is a finite real number above 0 (``unit``: what it
    counts, named in the message: ``Read time tR_us must be a positive number of microseconds``)."""
    of = f" of {unit}" if unit else ""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a positive number{of}, not {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a positive number{of}, not {value!r}")
    return float(value)


def index_bits(count: int) -> int:
    """Return the width of a field holding an index below ``count``: at least 1, so that every
    field of a layout exists even when it can hold only 0."""
    return max(1, (count - 1).bit_length())
