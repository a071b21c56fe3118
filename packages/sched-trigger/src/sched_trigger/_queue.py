"""The bounded FIFO between the request sources and the one executor: `Queue`."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, final

from ._durations import Duration, to_seconds
from ._errors import QueueClosed, QueueFull
from ._job import Job, _wake

__all__ = ["Queue"]

P = TypeVar("P")


@final
class Queue(Generic[P]):
    """A bounded FIFO of `Job` objects that never blocks the submitter.

    `submit` accepts a job or fails fast, from any thread (a ticker thread as
    well as the event loop). The receiving side takes jobs from a plain thread
    (``for job in queue``, or `get` with a stop event and a timeout) or on an
    event loop (``async for job in queue``, or ``await queue.aget()``); either
    iteration ends once the queue is closed and drained. A receiver that is
    waiting takes a job directly, as a Go channel hands a value to a blocked
    receiver; *capacity* jobs more may wait in the buffer. Capacity 0 is
    therefore a rendezvous: a job is accepted only while a receiver is idle
    and waiting.

    Args:
        capacity: how many jobs may wait while the executor is busy.

    Raises:
        ValueError: *capacity* is negative.
        TypeError: *capacity* is not an ``int``.
    """

    __slots__ = (
        "_capacity",
        "_closed",
        "_items",
        "_lock",
        "_promised",
        "_taken",
        "_unwoken",
        "_waiters",
    )

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int):
            raise TypeError(f"capacity must be an int, not {type(capacity).__name__}")
        if capacity < 0:
            raise ValueError(f"capacity must be 0 or more, got {capacity}")
        self._capacity = capacity
        self._lock = threading.Lock()
        self._items: deque[Job[P]] = deque()
        # Receivers blocked in get() or aget() that no job has been handed to yet.
        self._waiters: deque[_Waiter | _ThreadWaiter] = deque()
        # Jobs in _items already handed to a woken receiver that has not taken them yet.
        self._promised = 0
        self._closed = False
        # Jobs a custom executor took and may not have finished (tracked for it only).
        self._taken: list[Job[P]] | None = None
        # Thread receivers handed a job by the server's loop, to be woken at the end of
        # its turn (`_submit`): woken now, they would only wait for the loop's GIL.
        self._unwoken: list[_ThreadWaiter] = []

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Queue capacity={self._capacity} queued={len(self._items)} {state}>"

    def __len__(self) -> int:
        """The number of accepted jobs no receiver has taken yet."""
        return len(self._items)

    @property
    def capacity(self) -> int:
        """How many jobs may wait while the executor is busy."""
        return self._capacity

    @property
    def closed(self) -> bool:
        """Whether `close` has been called."""
        return self._closed

    def submit(self, job: Job[P]) -> None:
        """Accept *job* or fail at once; safe to call from any thread.

        Args:
            job: the request to queue.

        Raises:
            QueueFull: the queue is at capacity (message ``run queue is full``).
            QueueClosed: the queue is closed (message ``scheduler is shutting down``).
        """
        self._submit(job, False)

    def _submit(self, job: Job[P], defer: bool) -> bool:
        """`submit`; with *defer*, a thread receiver handed the job is woken by `_wake_deferred`.

        The server defers on its loop thread, whose turn holds the GIL: a worker
        woken in the middle of it would only wait for it, and take the GIL back
        between the loop's callbacks. Woken at the end of the turn, it takes
        every job the turn queued in one go.

        Returns:
            Whether a thread receiver was handed the job and woken now.
        """
        lock = self._lock
        lock.acquire()  # (cheaper than ``with`` on the hot path; released on every way out)
        try:
            if self._closed:
                raise QueueClosed
            waiters = self._waiters
            if len(self._items) - self._promised >= self._capacity + len(waiters):
                raise QueueFull
            self._items.append(job)
            if not waiters:
                return False
            waiter = waiters.popleft()  # hand the job to the longest-waiting receiver
            waiter.promised = True
            self._promised += 1
            if waiter.__class__ is _ThreadWaiter:
                if defer:
                    self._unwoken.append(waiter)
                    return False
                woke_thread = True
            else:
                woke_thread = False
        finally:
            lock.release()
        waiter.wake()
        return woke_thread

    def _wake_deferred(self) -> None:
        """Wake the thread receivers `_submit` handed jobs to without waking them."""
        with self._lock:
            waiters, self._unwoken = self._unwoken, []
        for waiter in waiters:
            waiter.wake()

    def close(self) -> None:
        """Refuse new jobs from now on; the receiver still drains what was accepted.

        Idempotent.
        """
        with self._lock:
            self._closed = True
            waiters: list[_Waiter | _ThreadWaiter] = [*self._waiters, *self._unwoken]
            self._waiters.clear()
            self._unwoken = []
        for waiter in waiters:
            waiter.wake()

    def _promise(self) -> _Waiter | _ThreadWaiter:
        """Hand the newest job to the longest-waiting receiver (lock held)."""
        waiter = self._waiters.popleft()
        waiter.promised = True
        self._promised += 1
        return waiter

    def _take(self) -> Job[P]:
        """Pop the oldest job (lock held)."""
        job = self._items.popleft()
        taken = self._taken
        if taken is not None:
            taken[:] = [j for j in taken if not j.done]
            taken.append(job)
        return job

    def _withdraw(self, waiter: _Waiter | _ThreadWaiter) -> _Waiter | _ThreadWaiter | None:
        """A receiver gives up waiting (lock held): pass a job meant for it on.

        Returns:
            The next receiver to wake, if the job was handed on.
        """
        if waiter.promised:
            self._promised -= 1
            waiter.promised = False
            if self._waiters:
                return self._promise()
        elif waiter in self._waiters:
            self._waiters.remove(waiter)
        return None

    def get(
        self, *, stop: threading.Event | None = None, timeout: Duration | None = None
    ) -> Job[P] | None:
        """Take the oldest job, blocking the calling thread until one arrives.

        For an executor running on its own thread. A job already waiting is
        returned even if *stop* is set.

        Args:
            stop: return ``None`` as soon as this event is set.
            timeout: return ``None`` after this long (a ``timedelta`` or
                seconds); ``None`` waits for ever, 0 does not wait.

        Returns:
            The next job, in arrival order; ``None`` if *stop* was set or
            *timeout* passed first.

        Raises:
            QueueClosed: the queue is closed and drained.
            RuntimeError: called on a thread running an event loop with a
                wait that could block it (use `aget` there).
        """
        seconds = None if timeout is None else max(to_seconds(timeout, name="timeout"), 0.0)
        if seconds != 0:
            _refuse_on_a_loop()
        return self._get(stop, seconds)

    def _get(
        self,
        stop: threading.Event | None,
        seconds: float | None,
        waiter: _ThreadWaiter | None = None,
    ) -> Job[P] | None:
        """`get`; *waiter*, if given, is the caller's for every wait (`_jobs` keeps one).

        A waiter is re-armed by each wait that returns (its lock is held again),
        so one serves any number of waits; a late wake-up meant for an earlier
        wait only makes a later one look again.
        """
        deadline = None if seconds is None else time.monotonic() + seconds
        unsubscribe: Callable[[], None] | None = None
        lock = self._lock
        try:
            while True:
                lock.acquire()  # (cheaper than ``with`` on the hot path; released on every way out)
                try:
                    if self._items:
                        return self._items.popleft() if self._taken is None else self._take()
                    if self._closed:
                        raise QueueClosed
                    if seconds == 0 or (stop is not None and stop.is_set()):
                        return None
                    if waiter is None:
                        waiter = _ThreadWaiter()
                    waiter.promised = False
                    self._waiters.append(waiter)
                finally:
                    lock.release()
                if stop is not None and unsubscribe is None:
                    from ._stopwatch import subscribe

                    unsubscribe = subscribe(stop, waiter.wake)
                remaining = None if deadline is None else deadline - time.monotonic()
                woken = waiter.wait(remaining)
                lock.acquire()
                try:
                    if waiter.promised:  # a job was handed to us: take it, whatever woke us
                        waiter.promised = False
                        self._promised -= 1
                        if self._items:
                            return self._items.popleft() if self._taken is None else self._take()
                        continue
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)
                finally:
                    lock.release()
                if not woken:
                    return None  # the timeout passed
                # Woken by close() or the stop event: the top of the loop says which.
        finally:
            if unsubscribe is not None:
                unsubscribe()

    async def aget(self) -> Job[P]:
        """Take the oldest job, waiting on the event loop if the queue is empty.

        Returns:
            The next job, in arrival order.

        Raises:
            QueueClosed: the queue is closed and drained.
        """
        waiter = _Waiter(asyncio.get_running_loop())
        while True:
            job = self._take_or_enlist(waiter)
            if job is None:
                try:
                    await waiter.future
                except BaseException:
                    self._abandon(waiter)
                    raise
                job = self._woken(waiter)
            if job is not None:
                return job

    def _take_or_enlist(self, waiter: _Waiter) -> Job[P] | None:
        """The oldest job; or ``None``, with *waiter* given a fresh future and enlisted.

        One waiter serves a receiver for all its waits (`execute` keeps one).

        Raises:
            QueueClosed: the queue is closed and drained.
        """
        lock = self._lock
        lock.acquire()  # (cheaper than ``with`` on the hot path; released on every way out)
        try:
            if self._items:
                return self._items.popleft() if self._taken is None else self._take()
            if self._closed:
                raise QueueClosed
            waiter.future = waiter.loop.create_future()
            waiter.promised = False
            self._waiters.append(waiter)
            return None
        finally:
            lock.release()

    def _woken(self, waiter: _Waiter) -> Job[P] | None:
        """After *waiter*'s future resolved: the oldest job, if one is left for it."""
        lock = self._lock
        lock.acquire()
        try:
            if waiter.promised:
                waiter.promised = False
                self._promised -= 1
            if self._items:
                return self._items.popleft() if self._taken is None else self._take()
            return None
        finally:
            lock.release()

    def _abandon(self, waiter: _Waiter) -> None:
        """*waiter*'s receiver stops waiting (cancelled): a job handed to it goes on."""
        with self._lock:
            handoff = self._withdraw(waiter)
        if handoff is not None:
            handoff.wake()

    def _drain(self) -> list[Job[P]]:
        """Remove and return every job no receiver has taken yet."""
        with self._lock:
            items = list(self._items)
            self._items.clear()
        return items

    def __aiter__(self) -> Queue[P]:
        return self

    async def __anext__(self) -> Job[P]:
        try:
            return await self.aget()
        except QueueClosed:
            raise StopAsyncIteration from None

    def __iter__(self) -> Iterator[Job[P]]:
        _refuse_on_a_loop()
        return self._jobs()

    def _jobs(self) -> Iterator[Job[P]]:
        waiter = _ThreadWaiter()  # one for every wait
        lock, items = self._lock, self._items
        while True:
            lock.acquire()  # a job already waiting (the turn's others): taken without _get
            try:
                job = items.popleft() if items and self._taken is None else None
            finally:
                lock.release()
            if job is None:
                try:
                    job = self._get(None, None, waiter)
                except QueueClosed:
                    return
            assert job is not None  # no stop, no timeout
            yield job

    def _track_taken(self) -> list[Job[P]]:
        """Remember the jobs receivers take until they are finished (for a custom executor)."""
        with self._lock:
            if self._taken is None:
                self._taken = []
            return self._taken


@final
class _Waiter:
    """A receiver blocked in `Queue.get`, woken from any thread."""

    __slots__ = ("future", "loop", "promised")

    future: asyncio.Future[None]  # a fresh one for each wait (`Queue._take_or_enlist`)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.promised = False

    def wake(self) -> None:
        """Resolve the future on its own loop, from any thread."""
        _wake(self.loop, self.future)


@final
class _ThreadWaiter:
    """A receiver blocked in `Queue.get`, woken from any thread."""

    __slots__ = ("_lock", "promised")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.promised = False

    def wake(self) -> None:
        try:  # noqa: SIM105  # suppress() costs a context manager on every sync run
            self._lock.release()
        except RuntimeError:
            pass  # woken already

    def wait(self, timeout: float | None) -> bool:
        """Block until woken; False if *timeout* passed first."""
        if timeout is None:
            return self._lock.acquire()
        return timeout > 0 and self._lock.acquire(timeout=timeout)


def _refuse_on_a_loop() -> None:
    """Refuse a blocking wait on a thread that runs an event loop: it would freeze it."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError("Queue.get() blocks the thread; on an event loop use `await queue.aget()`")
