"""The asyncio twins: `arun_loop` and `astop_on_signals`.

Kept apart from the sync code so that ``import sched_loop`` does not import
asyncio; the package's ``__getattr__`` loads this module on first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Literal, TypeAlias

from ._durations import Duration
from ._plan import Clock, Plan
from ._signals import (
    DEFAULT_SIGNALS,
    check_policy,
    check_signals,
    previous_or_default,
    redeliver_default,
)

#: One unit of scheduled async work, awaited with the loop's stop event.
AsyncJob: TypeAlias = Callable[[asyncio.Event], Awaitable[object]]

#: Wait until *event* is set or *timeout* seconds pass; return whether it is set.
AsyncWait: TypeAlias = Callable[[asyncio.Event, float], Awaitable[bool]]


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait for *event* for at most *timeout* seconds; return whether it is set."""
    if not event.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()
    return event.is_set()


async def arun_loop(
    job: AsyncJob,
    interval: Duration,
    *,
    jitter: float = 0.0,
    fire_on_start: bool = False,
    stop: asyncio.Event | None = None,
    clock: Clock = time.monotonic,
    wait: AsyncWait = wait_event,
    rng: random.Random | None = None,
) -> None:
    """Await *job* now and then on a jittered interval until *stop* is set, then drain.

    The asyncio twin of `run_loop`, with the same schedule: runs never
    overlap, the first is immediate with *fire_on_start* and otherwise after
    one jittered delay, each later delay is drawn after the previous run
    returns, and no run starts once *stop* is set (even when the timer fires
    at that moment); the coroutine returns when the run in flight returns.

    Setting *stop* is the graceful stop. Cancelling the task running
    ``arun_loop`` is the hard stop: the ``CancelledError`` is raised inside
    the job's current ``await`` (the job may clean up, and should re-raise)
    and propagates out of ``arun_loop``.

    Args:
        job: an async callable awaited as ``await job(stop)``; its result is
            ignored and its exception propagates.
        interval: the nominal gap between runs, a ``timedelta`` or seconds.
        jitter: spread each delay over ``±jitter·interval``; in ``[0, 1)``.
        fire_on_start: run once immediately instead of after the first delay.
        stop: the graceful stop signal; ``None`` runs until cancelled.
        clock: a monotonic clock in seconds, for the deadline of each delay.
        wait: awaits the event or the timeout and returns whether the event
            is set; an ``asyncio.timeout`` around ``event.wait()`` by default.
        rng: the random source for jitter (the ``random`` module by default).

    Raises:
        LoopConfigError: *interval* is not positive, or *jitter* is outside
            ``[0, 1)``. It is a ``ValueError``.
        TypeError: *interval* or *jitter* has the wrong type.
    """
    plan = Plan(interval, jitter, rng)
    if stop is None:
        stop = asyncio.Event()
    if fire_on_start and not stop.is_set():
        await job(stop)
    while not stop.is_set():
        for timeout in plan.timeouts(clock):
            if await wait(stop, timeout):
                break
        # Checked again: the timer may have fired while stop was being set.
        if stop.is_set():
            return
        await job(stop)


@contextlib.asynccontextmanager
async def astop_on_signals(
    signals: Iterable[int] = DEFAULT_SIGNALS,
    *,
    second_signal: Literal["force", "catch"] = "force",
) -> AsyncIterator[asyncio.Event]:
    """Turn the first of *signals* into a set ``asyncio.Event``.

    The asyncio twin of `stop_on_signals`, built on
    ``loop.add_signal_handler`` (so the event is set from the event loop, never
    from a signal handler). Pass the event to `arun_loop` as its ``stop``. A
    second signal restores that signal's default action and re-delivers it
    (``second_signal="force"``), or is caught like the first until the block
    exits (``"catch"``). On exit the loop's handlers are removed and the
    previous Python-level handlers restored.

    Args:
        signals: the signals to handle; SIGTERM and SIGINT by default.
        second_signal: ``"force"`` or ``"catch"``, as for `stop_on_signals`.

    Yields:
        The stop event, set by the first signal.

    Raises:
        LoopConfigError: not in the main thread, no signals, an unknown
            signal number or an unknown *second_signal*. It is a
            ``ValueError``.
        RuntimeError: a signal cannot be caught (``SIGKILL``, ``SIGSTOP``).
    """
    sigs = check_signals(signals, "astop_on_signals")
    force = check_policy(second_signal, "astop_on_signals")
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received = 0

    def on_signal(signum: int) -> None:
        # Runs as an ordinary event-loop callback, not in the signal handler.
        nonlocal received
        received += 1
        if received == 1:
            stop.set()
        elif force:
            loop.remove_signal_handler(signum)
            redeliver_default(signum)

    with contextlib.ExitStack() as undo:  # undone in reverse order
        for sig in sigs:
            previous = signal.getsignal(sig)
            loop.add_signal_handler(sig, on_signal, int(sig))  # changes nothing if it fails
            undo.callback(signal.signal, sig, previous_or_default(previous))
            undo.callback(loop.remove_signal_handler, sig)
        yield stop
