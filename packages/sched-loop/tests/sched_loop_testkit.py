"""Helpers shared by the sched-loop tests: synthetic time, child processes, strategies."""

from __future__ import annotations

import asyncio
import textwrap
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from hypothesis import strategies as st
from sched_testing import DEADLINE, Child

__all__ = [
    "DEADLINE",
    "Child",
    "FakeTime",
    "band_ns",
    "child",
    "fractions",
    "intervals",
    "jitters",
    "to_ns",
]

# --- strategies --------------------------------------------------------------

#: Intervals from one microsecond to a year, as timedeltas.
intervals = st.integers(min_value=1, max_value=365 * 86_400 * 10**6).map(
    lambda us: timedelta(microseconds=us)
)
#: Jitter fractions run_loop accepts.
jitters = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)
#: Any finite fraction jittered_delay accepts, including the clamped ones.
fractions = st.floats(min_value=-2.0, max_value=3.0, allow_nan=False)


def band_ns(interval: timedelta, fraction: float) -> tuple[int, int]:
    """The half-open band ``[lo, hi)`` of Go's JitteredDelay, in nanoseconds."""
    interval_ns = interval // timedelta(microseconds=1) * 1000
    span = int(float(interval_ns) * min(fraction, 1.0)) if fraction > 0 else 0
    return interval_ns - span, interval_ns + span


def to_ns(delay: timedelta) -> int:
    """A timedelta in integer nanoseconds."""
    return delay // timedelta(microseconds=1) * 1000


# --- synthetic time ----------------------------------------------------------


@dataclass
class FakeTime:
    """A clock and a wait that advances it instead of sleeping.

    ``wait`` records each timeout. If the event is already set it returns
    True at once. Otherwise ``on_wait`` (if any) may act — move ``now``, set
    the event — and return the wait's result itself; when it returns None (or
    there is none), the clock advances by the whole timeout and the wait
    reports whether the event is set.
    """

    now: float = 1_000.0
    waits: list[float] = field(default_factory=list)
    on_wait: Callable[[FakeTime, float], bool | None] | None = None

    def clock(self) -> float:
        return self.now

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return self._wait(event.is_set, timeout)

    async def await_(self, event: asyncio.Event, timeout: float) -> bool:
        await asyncio.sleep(0)  # sleep-ok: a real suspension point, as a real wait has
        return self._wait(event.is_set, timeout)

    def _wait(self, is_set: Callable[[], bool], timeout: float) -> bool:
        self.waits.append(timeout)
        if is_set():
            return True
        if self.on_wait is not None:
            result = self.on_wait(self, timeout)
            if result is not None:
                return result
        self.now += timeout
        return is_set()


# --- child processes ---------------------------------------------------------


def child(code: str) -> Child:
    """A Python child running ``code`` (dedented); use it in a ``with``: always reaped."""
    return Child(textwrap.dedent(code))
