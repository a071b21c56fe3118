"""The seam between the coalescing rules and what coordinates processes.

The rules in :mod:`._coalesce` need exactly three things, and ask for them
through :class:`Backend` only:

* a non-blocking exclusive lock held for the whole run, released by the
  coordinator itself when its holder dies (flock(2) here; a PostgreSQL
  session-level advisory lock would do the same across machines);
* an atomic read-modify-write transaction on one small non-negative counter,
  asked for as a :class:`Change` (one of three, each a pure function of the
  count that also says what it is, so that a backend that cannot run Python
  under its lock, a database, can express it in its own terms);
* the start of each cycle under a held lease (:meth:`Backend.start`): the
  counter settled or one request taken, and the cycle's *fencing token*
  drawn, a positive integer larger than every token of the name before it.
  A backend that can do both in one step does (a database: one statement,
  so that a holder dying around it either took the request and drew the
  token, or neither).

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
* **Liveness.** ``locked`` tells whether the lease still holds the lock. The
  start of every cycle proves it once more: a backend whose lock can be lost
  (a dropped database session) raises :class:`NotStarted` from
  :meth:`Backend.start` instead of starting a cycle unguarded.
* **Collection.** A lease dropped without ``unlock()`` releases the lock when
  it is collected. An exception from a signal handler can surface just as
  ``try_acquire`` returns, before the rules hold the lease; CPython then
  drops it at once, and only its finalizer can release it.

A lease whose lock can be lost while a job runs may also offer
``lost_event``, a :class:`threading.Event` it sets when that happens; the
job reads it through :func:`sched_exclusive.lock_lost`.
"""

from __future__ import annotations

from ._compat import TYPE_CHECKING, final

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Protocol
else:  # the protocols only speak to type checkers: no typing import at run time
    Protocol = object

__all__ = ["CLEAR", "TAKE_ONE", "Backend", "Change", "Lease", "NotStarted", "Started", "enqueue"]


@final
class Change:
    """A change of the counter, as a pure function of the count.

    ``kind`` names it: ``"enqueue"`` (one more, unless ``capacity`` are
    already queued), ``"take"`` (one less, unless none is queued) or
    ``"clear"`` (zero).
    """

    __slots__ = ("capacity", "kind")

    def __init__(self, kind: str, capacity: int = 0) -> None:
        self.kind = kind
        self.capacity = capacity

    def __call__(self, count: int) -> int:
        if self.kind == "take":
            return count - 1 if count > 0 else count
        if self.kind == "enqueue":
            return count + 1 if count < self.capacity else count
        return 0

    def __repr__(self) -> str:
        return f"Change({self.kind!r}, {self.capacity})"


#: Take one queued request (a run that is about to start serves it).
TAKE_ONE = Change("take")
#: Clear every queued request (a fresh acquisition's run serves them all).
CLEAR = Change("clear")


def enqueue(capacity: int) -> Change:
    """Record one more request, unless ``capacity`` are already queued."""
    return Change("enqueue", capacity)


#: What :meth:`Backend.start` returns: the count before the change, the
#: cycle's token (or why the cycle has none: the error a job asking for it
#: gets), and the counter's failure, if any (the rules then act as for any
#: counter failure: the first run and a handoff start all the same, a rerun
#: does not).
Started = tuple[int, int | OSError, OSError | None]


class NotStarted(OSError):
    """The cycle must not start: nothing ran under it and the counter is as it was.

    A backend raises it from :meth:`Backend.start` when starting would run a
    job unguarded (the lock's session is gone) or too early (an earlier
    cycle's fenced transaction is still open), and from
    :meth:`Backend.read_counter` through a lease whose lock is gone: no
    further cycle may start under it, and the call ends there (no handoff).
    """


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

    def read_counter(self, lease: Lease | None = None) -> int:
        """Read the queued-request counter (unreadable content counts as zero).

        Args:
            lease: the lease the caller holds, if any: the read then sees
                every change the cycles started under it made (a backend may
                read through it).

        Raises:
            OSError: the counter could not be read.
        """

    def update_counter(self, fn: Change) -> int:
        """Replace the counter ``n`` by ``fn(n)`` atomically.

        ``fn`` is pure and may be called under the transaction's lock (or
        expressed by its ``kind``); when it returns ``n`` the backend need
        write nothing.

        Returns:
            The counter as it was before (the ``n`` that ``fn`` saw).

        Raises:
            OSError: the transaction failed; the counter may or may not have
                changed only if the failure came after the read.
        """

    def start(
        self,
        lease: Lease,
        change: Change,
        *,
        always: bool = False,
        seen: Callable[[int], None] | None = None,
    ) -> Started:
        """Start a cycle under ``lease``: apply ``change`` and draw its token.

        Args:
            lease: the held lease the cycle runs under.
            change: ``CLEAR`` (a fresh acquisition) or ``TAKE_ONE`` (the
                request the cycle serves).
            always: the cycle starts whatever ``change`` finds (the first
                run of a call), so a token is drawn in any case.
            seen: called with the count ``change`` will find (or a lower
                one: only requests can arrive meanwhile), *before* the
                change commits, so that what the rules log about it (the
                stale line) runs before the take and not between the take
                and the job, where a holder dying loses what it took. A
                backend may skip it when the count is zero, and does not
                call it when the count cannot be read.

        Returns:
            The count before the change, the token, and the counter's
            failure (see :data:`Started`). Without ``always``, a
            ``TAKE_ONE`` that found nothing to take starts no cycle, and
            draws no token (or one that stays unused).

        Raises:
            NotStarted: the cycle must not start (see :class:`NotStarted`).
        """
