"""The schedule shared by `run_loop` and `arun_loop`: validation and the waits between runs.

Both loops are the same three steps — an optional immediate first run, then
"wait out one jittered delay, then run unless stopped" until stopped — and
differ only in how they block. This module owns everything but the blocking,
so the two drivers cannot drift apart.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TypeAlias, final

from ._durations import Duration
from ._errors import LoopConfigError
from ._jitter import coerce_fraction, coerce_interval, draw_delay

#: A monotonic clock in seconds, like ``time.monotonic``.
Clock: TypeAlias = Callable[[], float]

_ZERO = timedelta(0)
# The longest timeout threading's locks accept; a longer delay is waited out
# in several waits (one per ~292 years, so in practice always one).
_MAX_WAIT = threading.TIMEOUT_MAX


@final
class Plan:
    """A validated loop configuration that draws the delays between runs."""

    __slots__ = ("_interval", "_jitter", "_rng")

    def __init__(self, interval: Duration, jitter: float, rng: random.Random | None) -> None:
        self._interval = coerce_interval(interval)
        if self._interval <= _ZERO:
            raise LoopConfigError(f"interval must be positive, got {interval!r}")
        self._jitter = coerce_fraction(jitter, name="jitter")
        if not 0.0 <= self._jitter < 1.0:
            raise LoopConfigError(f"jitter must be in [0, 1), got {jitter!r}")
        self._rng = rng

    def timeouts(self, clock: Clock) -> Iterator[float]:
        """Yield the timeouts of the waits that make up the delay before the next run.

        One delay is drawn when iteration starts (that is, after the previous
        run returned) and fixes a deadline on *clock*. Normally a single wait
        covers it; if a wait returns early (coarse timers, or a delay longer
        than the platform's longest timeout) the next timeout is what remains
        until the deadline. The caller stops iterating as soon as a wait
        reports the stop signal.
        """
        delay = draw_delay(self._interval, self._jitter, self._rng).total_seconds()
        deadline = clock() + delay
        remaining = delay
        while remaining > 0:
            yield min(remaining, _MAX_WAIT)
            remaining = deadline - clock()
