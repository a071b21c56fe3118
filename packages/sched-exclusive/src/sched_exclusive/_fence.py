"""What a running job asks of its cycle: ``lock_lost``, ``fencing_token``, ``fence``.

The drivers in :mod:`._driver` set :data:`RUNNING` around each run.
"""

from __future__ import annotations

import contextvars
import threading

from ._compat import TYPE_CHECKING
from ._errors import CoordinationError
from ._outcome import Outcome

if TYPE_CHECKING:
    from typing import Any, Protocol

    from ._coalesce import Cycle
else:  # the protocol only speaks to type checkers: no typing import at run time
    Protocol = object

__all__ = ["RUNNING", "afence", "fence", "fencing_token", "lock_lost", "running_cycle"]

#: The cycle of the job running in this context (set by the drivers around each run).
RUNNING: contextvars.ContextVar[Cycle | None] = contextvars.ContextVar(
    "sched_exclusive_running", default=None
)


def running_cycle(what: str) -> Cycle:
    """The cycle of the job running in this context.

    Raises:
        RuntimeError: no job of an :class:`Exclusive` runs in this context
            (``what`` names the function that needs one).
    """
    cycle = RUNNING.get()
    if cycle is None:
        raise RuntimeError(f"{what} is only available inside a job run by Exclusive")
    return cycle


def lock_lost() -> threading.Event:
    """The event set when the running job's cycle lock is lost.

    Call it from inside a job run by :class:`Exclusive` (the call's own run or
    a rerun, sync or asyncio), before a side effect that must not happen
    unguarded, and stop if it is set::

        def job() -> None:
            lost = lock_lost()
            prepare()
            if lost.is_set():
                raise RuntimeError("the cycle lock was lost; not publishing")
            publish()

    With :meth:`Exclusive.postgres` the holder watches its session while the
    job runs (the socket closing, and a check every 2 seconds) and sets the
    event when the session, and the lock with it, is gone; the call then starts no rerun and reports
    the loss. A flock(2) lock cannot be lost while its holder lives, so with
    a directory the event is never set. Pass the event itself to threads the
    job starts: they do not see the job's context.

    Returns:
        The event of the lease the current job runs under.

    Raises:
        RuntimeError: no job of an :class:`Exclusive` runs in this context.

    """
    event = getattr(running_cycle("lock_lost()").lease, "lost_event", None)
    return event if isinstance(event, threading.Event) else threading.Event()


def fencing_token() -> int:
    """The fencing token of the cycle the running job runs as.

    Every cycle of a name gets one as it starts — the call's own run, each
    queued rerun, each handoff; with either backend, through :meth:`~Exclusive.run`,
    :meth:`~Exclusive.run_or_skip`, :meth:`~Exclusive.arun` or
    :meth:`~Exclusive.arun_or_skip` — larger than the token of every cycle of
    that name before it, across processes, hosts and restarts. Pass it to a
    store that keeps the largest token it has seen and refuses a write
    carrying a smaller one: a holder that lost its lock without knowing it
    (a paused VM, a partition) is then refused once a later cycle has
    written. Tokens are positive integers below ``2**63`` (they fit a
    ``bigint``), drawn from the clock in microseconds or the previous token
    plus one, whichever is larger: not consecutive, and not starting at 1.

    With a directory, the token is kept in ``dir/cycle.fence``; cycles run
    by a Go process sharing the directory take none. With
    :meth:`Exclusive.postgres`, it is the ``token`` column of the name's row,
    drawn by the statement that starts the cycle; see also :func:`fence`.

    Returns:
        The token.

    Raises:
        RuntimeError: no job of an :class:`Exclusive` runs in this context.
        CoordinationError: this cycle has no token (the fence file could not
            be written, say); the message says why.
    """
    token = running_cycle("fencing_token()").token
    if isinstance(token, OSError):
        raise CoordinationError.from_os_error(token, Outcome.RAN) from token
    return token


class _Fencer(Protocol):
    """A backend that can fence a transaction (PostgreSQL's)."""

    def fence(self, conn: Any, token: int | OSError) -> int: ...
    async def afence(self, aconn: Any, token: int | OSError) -> int: ...


def _fencer(cycle: Cycle, what: str) -> _Fencer:
    backend: Any = cycle.backend
    if not hasattr(backend, "fence"):
        raise RuntimeError(
            f"{what} needs a job run by Exclusive.postgres, which coordinates through the "
            "database the transaction writes to; this job's cycle is coordinated through a "
            "directory: pass fencing_token() to the store instead"
        )
    fencer: _Fencer = backend
    return fencer


def fence(conn: Any) -> int:
    """Fence the transaction open on ``conn`` by the running job's cycle.

    Call it from a job run by :meth:`Exclusive.postgres`, on the
    application's own psycopg connection to the same database, inside the
    transaction that makes the job's irreversible writes (before or after
    them, before the commit). It costs one round trip. Then:

    * if no later cycle of the job's name has started, it returns the
      cycle's token (:func:`fencing_token`), and **this transaction, if it
      commits, commits before any later cycle of the name starts**: a later
      cycle waits for it to end, at most the ``statement_timeout`` of its
      coordinator, and then fails with `CoordinationError` instead of
      starting;
    * if a later cycle has already started (this holder lost its lock
      without knowing it), it raises `FencedOut`: roll the transaction
      back.

    The fence is a ``FOR KEY SHARE`` lock on the name's row in the
    ``sched_exclusive`` table, held by the transaction until it ends:
    requesters (whose counter updates take ``FOR NO KEY UPDATE``) never wait
    on it; only the start of a cycle (``FOR UPDATE``) does. Keep the
    transaction short: a fenced transaction left open delays the next cycle.

    Args:
        conn: a ``psycopg.Connection`` to the database the job's coordinator
            uses, not in autocommit mode.

    Returns:
        The cycle's fencing token.

    Raises:
        FencedOut: a later cycle of the name has started.
        RuntimeError: no job of an :class:`Exclusive` runs in this context,
            or its coordinator is a directory.
        TypeError: ``conn`` is not a psycopg ``Connection``.
        ValueError: ``conn`` is in autocommit mode (there is no transaction
            to fence), or connected to another database than the
            coordinator's.
        CoordinationError: this cycle has no token, or the fence statement
            failed (its psycopg error is chained).
    """
    cycle = running_cycle("fence()")
    return _fencer(cycle, "fence()").fence(conn, cycle.token)


async def afence(aconn: Any) -> int:
    """:func:`fence` on a ``psycopg.AsyncConnection``, for a job run by ``arun``.

    Args:
        aconn: a ``psycopg.AsyncConnection`` to the coordinator's database,
            not in autocommit mode.

    Returns:
        The cycle's fencing token.

    Raises:
        FencedOut: as for :func:`fence`.
        RuntimeError: as for :func:`fence`.
        TypeError: ``aconn`` is not a psycopg ``AsyncConnection``.
        ValueError: as for :func:`fence`.
        CoordinationError: as for :func:`fence`.
    """
    cycle = running_cycle("afence()")
    return await _fencer(cycle, "afence()").afence(aconn, cycle.token)
