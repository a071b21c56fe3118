"""The seam between the coalescing rules and what coordinates processes.

The rules in :mod:`._coalesce` need exactly two things, and ask for them
through :class:`Backend` only:

* a non-blocking exclusive lock held for the whole run, released by the
  coordinator itself when its holder dies (flock(2) here; a PostgreSQL
  session-level advisory lock would do the same across machines);
* an atomic read-modify-write transaction on one small non-negative counter.

A second backend implements this protocol and reuses every rule unchanged.
Failures are raised as :class:`OSError` (a backend translates its own
errors); contention is never an error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

__all__ = ["Backend", "Lease"]


class Lease(Protocol):
    """A held exclusive lock."""

    def unlock(self) -> None:
        """Release the lock; calling it again does nothing."""


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
