"""One trigger request and its exactly-one-result lifecycle: `Job` and `Outcome`."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Generic, TypeVar, final

from ._durations import Duration, to_timedelta

__all__ = ["CANCELLED_REASON", "TRIGGER_EXTERNAL", "Job", "Outcome"]

#: The payload type: what a trigger carries to its run (a dataclass, parsed JSON, ...).
P = TypeVar("P")

#: The trigger name of a request that arrived through the socket server.
TRIGGER_EXTERNAL = "external"
#: The reason of a job finished by shutdown before it started (and of a run cut by cancellation).
CANCELLED_REASON = "cancelled: scheduler shutting down"

_MILLISECOND_US = 1000
_ZERO = timedelta(0)
#: Guards every job's state (a lock per job cost more than all of a job's other fields;
#: each holder keeps it for a few attribute reads and writes, never across a call out).
_LOCK = threading.Lock()
_EMPTY = ""  # CPython's one empty str: any other empty reason takes the general path


@final
class Outcome:
    """A job's final result: ``ok``, a ``reason`` and the run's ``duration``.

    An ok outcome may carry a reason too (``skipped: lock held by another
    process``); the wire keeps it. Immutable and hashable.

    Args:
        ok: whether the run succeeded.
        reason: why it failed, or a note on a success; empty for none.
        duration: how long the run took (a ``timedelta`` or seconds).

    Raises:
        ValueError, TypeError: *duration* is not a valid duration.
    """

    __slots__ = ("duration", "ok", "reason")
    __match_args__ = ("ok", "reason", "duration")

    ok: bool
    reason: str
    duration: timedelta

    def __new__(cls, ok: bool, reason: str = "", duration: Duration = 0) -> Outcome:
        # The outcomes without a reason or a duration (what most runs return) are
        # made once: immutable, they are shared like small ints.
        if reason is _EMPTY and duration.__class__ is int and duration == 0 and cls is Outcome:
            if ok is True:
                return _OK
            if ok is False:
                return _FAILED
        return _outcome(cls, ok, reason, duration)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Outcome is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Outcome is immutable; cannot delete {name!r}")

    def __repr__(self) -> str:
        return f"Outcome(ok={self.ok!r}, reason={self.reason!r}, duration={self.duration!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Outcome):
            return NotImplemented
        return (self.ok, self.reason, self.duration) == (other.ok, other.reason, other.duration)

    def __hash__(self) -> int:
        return hash((self.ok, self.reason, self.duration))

    def __reduce__(self) -> tuple[type[Outcome], tuple[bool, str, timedelta]]:
        return (Outcome, (self.ok, self.reason, self.duration))

    @property
    def duration_ms(self) -> int:
        """Whole milliseconds of ``duration``, truncated toward zero, as the wire carries it."""
        d = self.duration
        if not d:
            return 0
        micros = (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds
        whole = abs(micros) // _MILLISECOND_US
        return -whole if micros < 0 else whole


def _outcome(cls: type[Outcome], ok: object, reason: object, duration: Duration) -> Outcome:
    """A new `Outcome` (its fields checked and converted)."""
    self = object.__new__(cls)
    object.__setattr__(self, "ok", bool(ok))
    object.__setattr__(self, "reason", str(reason))
    if duration.__class__ is not timedelta:
        duration = (
            _ZERO
            if duration == 0 and duration.__class__ is int
            else to_timedelta(duration, name="duration")
        )
    object.__setattr__(self, "duration", duration)
    return self


_OK = _outcome(Outcome, True, "", 0)
_FAILED = _outcome(Outcome, False, "", 0)


def _wake(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
    """Resolve *future* on its own loop, from any thread."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        if not future.done():
            future.set_result(None)
        return
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@final
class Job(Generic[P]):
    """One request and its exactly-one-result lifecycle.

    The executor calls `start` when the run begins (at most once) and `finish`
    with the `Outcome` (exactly once; a job may be finished without ever
    starting, when shutdown cancels it). Both are safe from any thread. The
    submitter waits for the run to start and for its result on an event loop
    (`await_started`, `aresult`) or from a thread (`wait_started`, `result`).

    Args:
        trigger: who asked for the run (`TRIGGER_EXTERNAL` for socket requests,
            ``"ticker"`` or any name for the daemon's own sources).
        payload: the run's arguments.
    """

    __slots__ = ("_cond", "_listeners", "_outcome", "_started", "payload", "trigger")

    def __init__(self, trigger: str, payload: P) -> None:
        self.trigger = trigger
        self.payload = payload
        self._cond: threading.Condition | None = None
        self._started = False
        self._outcome: Outcome | None = None
        self._listeners: list[Callable[[], object]] = []

    def __repr__(self) -> str:
        state = "finished" if self._outcome is not None else "started" if self._started else "new"
        return f"<Job trigger={self.trigger!r} {state}>"

    @property
    def started(self) -> bool:
        """Whether `start` has been called (the run began)."""
        return self._started

    @property
    def done(self) -> bool:
        """Whether `finish` has been called."""
        return self._outcome is not None

    @property
    def outcome(self) -> Outcome | None:
        """The final result, or ``None`` while the job is unfinished."""
        return self._outcome

    def start(self) -> None:
        """Mark the run as begun; the server sends ``started``.

        Raises:
            RuntimeError: the job was already started or finished.
        """
        _LOCK.acquire()  # (cheaper than ``with`` on the hot path; released on every way out)
        try:
            if self._started:
                raise RuntimeError("job already started")
            if self._outcome is not None:
                raise RuntimeError("job already finished")
            self._started = True
            if self._cond is not None:
                self._cond.notify_all()
            listeners = self._listeners[:]
        finally:
            _LOCK.release()
        for listener in listeners:
            listener()

    def finish(self, outcome: Outcome) -> None:
        """Deliver the job's one result; the server sends ``done``.

        Args:
            outcome: the run's result.

        Raises:
            TypeError: *outcome* is not an `Outcome`.
            RuntimeError: the job was already finished.
        """
        if not isinstance(outcome, Outcome):
            raise TypeError(f"finish() takes an Outcome, not {type(outcome).__name__}")
        _LOCK.acquire()
        try:
            if self._outcome is not None:
                raise RuntimeError("job already finished")
            self._outcome = outcome
            if self._cond is not None:
                self._cond.notify_all()
            listeners, self._listeners = self._listeners, []
        finally:
            _LOCK.release()
        for listener in listeners:
            listener()

    def _subscribe(self, listener: Callable[[], object]) -> None:
        """Call *listener* (in the changing thread) on every change, from now on.

        It is called at once if the job is already finished.
        """
        with _LOCK:
            if self._outcome is None:
                self._listeners.append(listener)
                return
        listener()

    def _unsubscribe(self, listener: Callable[[], object]) -> None:
        with _LOCK:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _wait(self, predicate: Callable[[], bool], timeout: Duration | None) -> None:
        seconds = None if timeout is None else to_timedelta(timeout, name="timeout").total_seconds()
        with _LOCK:
            if self._cond is None:
                self._cond = threading.Condition(_LOCK)
            if not self._cond.wait_for(predicate, seconds):
                raise TimeoutError("timed out waiting for the job")

    async def _until(self, predicate: Callable[[], bool]) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def listener() -> None:
            if predicate():
                _wake(loop, future)

        with _LOCK:
            if predicate():
                return
            self._listeners.append(listener)
        try:
            await future
        finally:
            self._unsubscribe(listener)

    def _started_or_done(self) -> bool:
        return self._started or self._outcome is not None

    def _is_done(self) -> bool:
        return self._outcome is not None

    def wait_started(self, timeout: Duration | None = None) -> bool:
        """Block the calling thread until the run starts or the job finishes.

        Args:
            timeout: bound on the wait; ``None`` waits for ever.

        Returns:
            ``True`` once the run started; ``False`` if the job was finished
            without starting (cancelled by shutdown).

        Raises:
            TimeoutError: *timeout* elapsed first.
        """
        self._wait(self._started_or_done, timeout)
        return self._started

    async def await_started(self) -> bool:
        """The asyncio twin of `wait_started` (without a timeout: use ``asyncio.timeout``).

        Returns:
            ``True`` once the run started; ``False`` if the job was finished
            without starting (cancelled by shutdown).
        """
        await self._until(self._started_or_done)
        return self._started

    def result(self, timeout: Duration | None = None) -> Outcome:
        """Block the calling thread until the job's result is delivered.

        Args:
            timeout: bound on the wait; ``None`` waits for ever.

        Returns:
            The `Outcome` passed to `finish`.

        Raises:
            TimeoutError: *timeout* elapsed first.
        """
        self._wait(self._is_done, timeout)
        assert self._outcome is not None
        return self._outcome

    async def aresult(self) -> Outcome:
        """The asyncio twin of `result` (without a timeout: use ``asyncio.timeout``).

        Returns:
            The `Outcome` passed to `finish`.
        """
        await self._until(self._is_done)
        assert self._outcome is not None
        return self._outcome
