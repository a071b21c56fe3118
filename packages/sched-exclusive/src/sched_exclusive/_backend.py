"""The seam between the coalescing rules and what coordinates processes.

The rules in :mod:`._coalesce` need exactly two things, and ask for them
through :class:`Backend` only:

* a non-blocking exclusive lock held for the whole run, released by the
  coordinator itself when its holder dies (flock(2) here; a PostgreSQL
  session-level advisory lock would do the same across machines);
* an atomic read-modify-write transaction on one small non-negative counter.

A second backend implements this protocol and reuses every rule unchanged:
which run starts when, what the counter becomes, what is logged, what a
caller gets back. Failures are raised as :class:`OSError` (a backend
translates its own errors); contention is never an error.

Three duties fall on a backend's lease because only it can meet them:

* **Ownership.** Only the process that acquired a lease releases the lock.
  In a process forked from it (``fork()`` without ``exec``), ``unlock()``
  gives up that process's handle only and never releases the lock for its
  owner (for flock: close without ``LOCK_UN``; for a database session: drop
  the inherited connection without a word on it). The rules themselves
  never touch the counter or start a run in such a process.
* **Liveness.** ``locked`` tells whether the lease still holds the lock; the
  rules ask before each rerun, so a lease that can be lost (a dropped
  database session) stops the reruns instead of running unguarded.
* **Collection.** A lease dropped without ``unlock()`` releases the lock when
  it is collected. An exception from a signal handler can surface just as
  ``try_acquire`` returns, before the rules hold the lease; CPython then
  drops it at once, and only its finalizer can release it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

__all__ = ["Backend", "Lease"]


class Lease(Protocol):
    """A held exclusive lock (see the module documentation for its duties)."""

    @property
    def locked(self) -> bool:
        """Whether this process still holds the lock through this lease."""

    def unlock(self) -> None:
        """Release the lock; calling it again does nothing.

        In a process other than the one that acquired the lease, give up
        only this process's handle: the lock stays its owner's.
        """


class Backend(Protocol):
    """The two coordination needs of :class:`Exclusive`."""

    def try_acquire(self) -> Lease | None:
        """Take the exclusive lock without waiting.

        Returns:
            The held lease, or ``None`` when another holder owns the lock.

        Raises:
            OSError: the lock could not be probed at all.
        """

    def read_counter(self) -> int:
        """Read the queued-request counter (unreadable content counts as zero).

        Raises:
            OSError: the counter could not be read.
        """

    def update_counter(self, fn: Callable[[int], int]) -> int:
        """Replace the counter ``n`` by ``fn(n)`` atomically.

        ``fn`` is pure and may be called under the transaction's lock; when
        it returns ``n`` the backend writes nothing.

        Returns:
            The counter as it was before (the ``n`` that ``fn`` saw).

        Raises:
            OSError: the transaction failed; the counter may or may not have
                changed only if the failure came after the read.
        """
