"""Duration arguments: a ``timedelta`` or a number of seconds.

Every sched package that takes a duration keeps a byte-identical private copy
of this module instead of depending on a shared runtime package. The source
is ``tools/copied/_durations.py``; ``python tools/copies.py`` writes the
copies, and a test fails when one differs. The rules, from the design:

* a ``datetime.timedelta`` is taken as it is;
* an ``int`` or ``float`` is a number of seconds;
* ``bool``, NaN and the infinities are rejected with ``ValueError``;
  any other type with ``TypeError``; both name the argument;
* a positive duration never converts to zero: a positive number of seconds
  below one microsecond becomes one microsecond.
"""

from __future__ import annotations

import math
from datetime import timedelta

__all__ = ["Duration", "to_seconds", "to_timedelta"]

#: What a duration parameter accepts (an implicit alias: no ``typing`` import at run time).
Duration = timedelta | int | float

_ONE_MICROSECOND = timedelta(microseconds=1)


def to_timedelta(value: Duration, *, name: str) -> timedelta:
    """Coerce a duration argument to a ``timedelta``.

    Args:
        value: a ``timedelta``, or a number of seconds.
        name: the parameter name, used in error messages.

    Returns:
        The duration; a positive input never yields ``timedelta(0)``.

    Raises:
        TypeError: *value* is neither a ``timedelta`` nor a real number.
        ValueError: *value* is a ``bool``, NaN, infinite, or out of range.
    """
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a duration, not a bool ({value!r})")
    if not isinstance(value, int | float):
        raise TypeError(
            f"{name} must be a timedelta or a number of seconds, not {type(value).__name__}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of seconds, got {value!r}")
    try:
        result = timedelta(seconds=value)
    except OverflowError:
        raise ValueError(f"{name} is out of range: {value!r} seconds") from None
    if value > 0 and not result:
        return _ONE_MICROSECOND
    return result


def to_seconds(value: Duration, *, name: str) -> float:
    """Coerce a duration argument to float seconds, by the rules of `to_timedelta`."""
    return to_timedelta(value, name=name).total_seconds()
