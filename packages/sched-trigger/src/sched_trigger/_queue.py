"""The bounded FIFO between the request sources and the one executor: `Queue`."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from typing import Generic, TypeVar, final

from ._errors import QueueClosed, QueueFull
from ._job import Job, _wake

__all__ = ["Queue"]

P = TypeVar("P")


@final
class Queue(Generic[P]):
    """A bounded FIFO of `Job` objects that never blocks the submitter.

    `submit` accepts a job or fails fast, from any thread (a ticker thread as
    well as the event loop). The receiving side is asynchronous: ``async for
    job in queue`` (which ends once the queue is closed and drained) or
    ``await queue.get()``. A receiver that is waiting takes a job directly, as
    a Go channel hands a value to a blocked receiver; *capacity* jobs more may
    wait in the buffer. Capacity 0 is therefore a rendezvous: a job is accepted
    only while the executor is idle and waiting.

    Args:
        capacity: how many jobs may wait while the executor is busy.

    Raises:
        ValueError: *capacity* is negative.
        TypeError: *capacity* is not an ``int``.
    """

    __slots__ = ("_capacity", "_closed", "_items", "_lock", "_promised", "_waiters")

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int):
            raise TypeError(f"capacity must be an int, not {type(capacity).__name__}")
        if capacity < 0:
            raise ValueError(f"capacity must be 0 or more, got {capacity}")
        self._capacity = capacity
        self._lock = threading.Lock()
        self._items: deque[Job[P]] = deque()
        # Receivers blocked in get() that no job has been handed to yet.
        self._waiters: deque[_Waiter] = deque()
        # Jobs in _items already handed to a woken receiver that has not taken them yet.
        self._promised = 0
        self._closed = False

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
        with self._lock:
            if self._closed:
                raise QueueClosed
            if len(self._items) - self._promised >= self._capacity + len(self._waiters):
                raise QueueFull
            self._items.append(job)
            waiter = self._promise() if self._waiters else None
        if waiter is not None:
            waiter.wake()

    def close(self) -> None:
        """Refuse new jobs from now on; the receiver still drains what was accepted.

        Idempotent.
        """
        with self._lock:
            self._closed = True
            waiters = list(self._waiters)
            self._waiters.clear()
        for waiter in waiters:
            waiter.wake()

    def _promise(self) -> _Waiter:
        """Hand the newest job to the longest-waiting receiver (lock held)."""
        waiter = self._waiters.popleft()
        waiter.promised = True
        self._promised += 1
        return waiter

    async def get(self) -> Job[P]:
        """Take the oldest job, waiting for one if the queue is empty.

        Returns:
            The next job, in arrival order.

        Raises:
            QueueClosed: the queue is closed and drained.
        """
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                if self._items:
                    return self._items.popleft()
                if self._closed:
                    raise QueueClosed
                waiter = _Waiter(loop)
                self._waiters.append(waiter)
            try:
                await waiter.future
            except BaseException:
                handoff = None
                with self._lock:
                    if waiter.promised:
                        # A job was meant for this receiver: pass it on, or leave it buffered.
                        self._promised -= 1
                        if self._waiters:
                            handoff = self._promise()
                    elif waiter in self._waiters:
                        self._waiters.remove(waiter)
                if handoff is not None:
                    handoff.wake()
                raise
            with self._lock:
                if waiter.promised:
                    self._promised -= 1
                if self._items:
                    return self._items.popleft()

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
            return await self.get()
        except QueueClosed:
            raise StopAsyncIteration from None


@final
class _Waiter:
    """A receiver blocked in `Queue.get`, woken from any thread."""

    __slots__ = ("future", "loop", "promised")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[None] = loop.create_future()
        self.promised = False

    def wake(self) -> None:
        _wake(self.loop, self.future)
