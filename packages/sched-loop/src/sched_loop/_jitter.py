"""``jittered_delay``, the pure core of the loop's jitter, and duration coercion.

The Go library's ``JitteredDelay`` works on ``time.Duration`` (integer
nanoseconds). The most faithful reading of its contract (uniform over
``[interval − fraction·interval, interval + fraction·interval)``, "a
non-positive fraction or interval returns interval unchanged") in Go is::

    if fraction <= 0 || interval <= 0 {
        return interval
    }
    fraction = min(fraction, 1)
    span := time.Duration(float64(interval) * fraction)
    return interval - span + time.Duration(rand.Int64N(int64(2*span)))

This module computes exactly that: the interval in integer nanoseconds is
converted to a float64, multiplied by the fraction and truncated toward zero
(Go's float-to-integer conversion) to give ``span``; one integer is drawn
uniformly from ``[0, 2·span)``. Where Go would call ``rand.Int64N(0)`` (a span
that truncates to zero) the interval is returned unchanged, and where Go's
``2*span`` would overflow ``int64`` (intervals of centuries) Python's integers
simply do not.
"""

from __future__ import annotations

import math
import random
from datetime import timedelta

from ._durations import Duration, to_timedelta
from ._errors import LoopConfigError

_ZERO = timedelta(0)
_ONE_MICROSECOND = timedelta(microseconds=1)
_NS_PER_US = 1_000
_MAX_US = timedelta.max // _ONE_MICROSECOND


def coerce_interval(value: Duration, *, name: str = "interval") -> timedelta:
    """Coerce a duration argument, reporting a bad value as `LoopConfigError`."""
    try:
        return to_timedelta(value, name=name)
    except ValueError as exc:
        raise LoopConfigError(str(exc)) from None


def coerce_fraction(value: float, *, name: str) -> float:
    """Coerce a jitter fraction to a finite float.

    Raises:
        TypeError: *value* is not a real number.
        LoopConfigError: *value* is a ``bool``, NaN or infinite.
    """
    if isinstance(value, bool):
        raise LoopConfigError(f"{name} must be a number, not a bool ({value!r})")
    if not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    result = float(value)
    if not math.isfinite(result):
        raise LoopConfigError(f"{name} must be finite, got {value!r}")
    return result


def draw_delay(interval: timedelta, fraction: float, rng: random.Random | None) -> timedelta:
    """Go's ``JitteredDelay`` on already coerced arguments."""
    if fraction <= 0 or interval <= _ZERO:
        return interval
    fraction = min(fraction, 1.0)
    interval_ns = (interval // _ONE_MICROSECOND) * _NS_PER_US
    span = int(float(interval_ns) * fraction)  # float64(interval) * fraction, truncated
    if span <= 0:
        return interval
    draw = rng.randrange(2 * span) if rng is not None else random.randrange(2 * span)
    delay_ns = interval_ns - span + draw
    # timedelta holds microseconds: truncate (so the result stays below the
    # band's open upper end), but never turn a positive delay into zero.
    delay_us = delay_ns // _NS_PER_US
    if delay_ns > 0 and delay_us == 0:
        delay_us = 1
    # Only a band reaching past timedelta.max (~2.7 million years) is clamped.
    return timedelta(microseconds=min(delay_us, _MAX_US))


def jittered_delay(
    interval: Duration, fraction: float, *, rng: random.Random | None = None
) -> timedelta:
    """Draw a delay uniformly from ``[interval − fraction·interval, interval + fraction·interval)``.

    The pure core of the loop's jitter (the Go library's ``JitteredDelay``). The draw
    is made in integer nanoseconds exactly as the Go library does (see the
    module notes) and returned as a ``timedelta``, truncated to whole
    microseconds; a positive draw never becomes zero.

    Args:
        interval: the nominal delay, a ``timedelta`` or a number of seconds.
        fraction: the half-width of the band as a fraction of *interval*.
            A fraction ``<= 0`` (or an interval ``<= 0``) returns *interval*
            unchanged; a fraction above 1 is taken as 1.
        rng: the random source; the ``random`` module's shared generator when
            ``None``. Pass your own ``random.Random`` to make draws repeatable.

    Returns:
        The delay, a ``timedelta``.

    Raises:
        LoopConfigError: *interval* or *fraction* is NaN or infinite (or a
            ``bool``). It is a ``ValueError``.
        TypeError: an argument is not a duration or a number.
    """
    base = coerce_interval(interval)
    return draw_delay(base, coerce_fraction(fraction, name="fraction"), rng)
