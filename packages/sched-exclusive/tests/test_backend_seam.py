"""The coalescing rules depend only on the backend seam: an in-memory backend reuses them.

The PostgreSQL backend (``Exclusive.postgres``) relies on exactly this: the
rules in ``_coalesce`` run unchanged over anything that offers a
non-blocking exclusive lock and an atomic counter transaction.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable
from typing import final

import pytest

from sched_exclusive import Outcome, RunError
from sched_exclusive._backend import Backend, Change, Lease, NotStarted, Started
from sched_exclusive._coalesce import Lines, coalesce
from sched_exclusive._driver import drive


@final
class MemoryLease:
    """A held mutex."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock: threading.Lock | None = lock
        self.lost = False

    @property
    def locked(self) -> bool:
        return self._lock is not None and not self.lost

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None


@final
class MemoryBackend:
    """One process's worth of coordination: a mutex and an integer."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.guard = threading.RLock()
        self.count = 0
        self.token = 0

    def try_acquire(self) -> MemoryLease | None:
        return MemoryLease(self.lock) if self.lock.acquire(blocking=False) else None

    def read_counter(self, lease: Lease | None = None) -> int:
        with self.guard:
            return self.count

    def update_counter(self, fn: Callable[[int], int]) -> int:
        with self.guard:
            before, self.count = self.count, fn(self.count)
            return before

    def start(
        self,
        lease: Lease,
        change: Change,
        *,
        always: bool = False,
        seen: Callable[[int], None] | None = None,
    ) -> Started:
        if not lease.locked:
            raise NotStarted(errno.ENOLCK, "the lease was lost")
        with self.guard:
            if seen is not None:
                seen(self.count)
            self.token += 1
            return self.update_counter(change), self.token, None


def request(backend: Backend, job: Callable[[], object], *, queue: bool = True) -> Outcome:
    lines = Lines(logging.getLogger("sched_exclusive.test.memory"), {})
    return drive(coalesce(backend, queue=queue, capacity=1, gate=None, log=lines), job)


def test_the_rules_run_over_a_memory_backend() -> None:
    """Queue, discard, skip, rerun and the cap behave as over files."""
    backend = MemoryBackend()
    inner: list[Outcome] = []
    runs = 0

    def job() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            inner.append(request(backend, job))
            inner.append(request(backend, job))
            inner.append(request(backend, job, queue=False))

    assert Outcome.RAN_QUEUED == request(backend, job)
    assert [Outcome.QUEUED, Outcome.DISCARDED, Outcome.SKIPPED] == inner
    assert 2 == runs
    assert (0, False) == (backend.count, backend.lock.locked())

    def relentless() -> None:
        request(backend, lambda: None)

    assert Outcome.RAN_QUEUED == request(backend, relentless)
    assert 1 == backend.count  # deferred past the cap of 8 reruns


def test_a_lost_lease_stops_the_reruns() -> None:
    """A lease that no longer holds the lock (a backend whose lock can be lost, such as a
    database session that dropped) stops the reruns with an ENOLCK error: no run starts
    unguarded, and the queued demand stays recorded."""
    backend = MemoryBackend()
    leases: list[MemoryLease] = []
    real_acquire = backend.try_acquire

    def acquire() -> MemoryLease | None:
        lease = real_acquire()
        if lease is not None:
            leases.append(lease)
        return lease

    backend.try_acquire = acquire  # type: ignore[method-assign]
    runs = 0

    def job() -> None:
        nonlocal runs
        runs += 1
        backend.count = 1  # a request queued meanwhile
        leases[0].lost = True  # and the lock lost under the holder

    with pytest.raises(RunError) as caught:
        request(backend, job)
    assert Outcome.RAN == caught.value.outcome
    assert [errno.ENOLCK] == [getattr(e, "errno", None) for e in caught.value.exceptions]
    assert (1, 1) == (runs, backend.count)
