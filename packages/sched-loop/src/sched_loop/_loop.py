"""`run_loop`: the sequential startup-plus-ticker loop that drains on stop."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import TypeAlias

from ._durations import Duration
from ._plan import Clock, Plan

#: One unit of scheduled work: called with the loop's stop event, its return
#: value is ignored (the Go library's ``Job``).
Job: TypeAlias = Callable[[threading.Event], object]

#: Block until *event* is set or *timeout* seconds pass; return whether it is set.
Wait: TypeAlias = Callable[[threading.Event, float], bool]


def run_loop(
    job: Job,
    interval: Duration,
    *,
    jitter: float = 0.0,
    fire_on_start: bool = False,
    stop: threading.Event | None = None,
    clock: Clock = time.monotonic,
    wait: Wait = threading.Event.wait,
    rng: random.Random | None = None,
) -> None:
    """Run *job* now and then on a jittered interval until *stop* is set, then drain.

    The Go library's ``RunLoop``. Runs are sequential: ``job(stop)`` is called in the
    calling thread and two runs never overlap. The first run starts at once
    with *fire_on_start* (never jittered), otherwise after one jittered delay.
    Each later delay is drawn after the previous run returns, so *interval* is
    the gap between runs, not a fixed rate. Between runs the thread sleeps in
    a single ``wait`` on *stop* (no polling).

    Once *stop* is set no new run starts — including when the timer fires at
    the same moment, and the startup fire when *stop* is already set — and
    the function returns as soon as the run in flight (if any) returns, so its
    return is a completed drain. The job decides itself how to react to
    *stop* during a run; the loop never interrupts it.

    Args:
        job: called as ``job(stop)``; its return value is ignored. An
            exception it raises propagates out of ``run_loop`` (the loop never
            hides a failure); catch and log inside the job to carry on.
        interval: the nominal gap between runs, a ``timedelta`` or seconds.
        jitter: spread each delay uniformly over ``±jitter·interval``
            (see `jittered_delay`); a fraction in ``[0, 1)``, 0 disables it.
        fire_on_start: run once immediately instead of after the first delay.
        stop: the stop signal; ``None`` runs until the process is interrupted
            (an internal event that nothing sets).
        clock: a monotonic clock in seconds, for the deadline of each delay.
        wait: blocks until the event is set or the timeout passes and returns
            whether it is set; ``threading.Event.wait`` by default. Together
            with *clock* it lets tests run the loop in synthetic time.
        rng: the random source for jitter (the ``random`` module by default).

    Raises:
        LoopConfigError: *interval* is not positive (or NaN, infinite), or
            *jitter* is outside ``[0, 1)``. Raised before anything runs. It is
            a ``ValueError``; the Go library returns silently instead.
        TypeError: *interval* or *jitter* has the wrong type.
    """
    plan = Plan(interval, jitter, rng)
    if stop is None:
        stop = threading.Event()
    if fire_on_start and not stop.is_set():
        job(stop)
    while not stop.is_set():
        for timeout in plan.timeouts(clock):
            if wait(stop, timeout):
                break
        # Checked again: the timer may have fired while stop was being set.
        if stop.is_set():
            return
        job(stop)
