"""``fence`` and ``afence``: a job's own PostgreSQL transaction, fenced by its cycle."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ._exclusive import running_cycle

if TYPE_CHECKING:
    from ._coalesce import Cycle

__all__ = ["afence", "fence"]


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
