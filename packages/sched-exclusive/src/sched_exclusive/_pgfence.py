"""``fence()`` on PostgreSQL: the job's own transaction, fenced by its cycle's token.

One statement on the application's connection, inside its transaction: it
locks the name's row ``FOR KEY SHARE`` until the transaction ends and reads
the row's token, with the database's identity (:mod:`._pgtable` learns the
coordinator's). ``FOR KEY SHARE`` conflicts with ``FOR UPDATE`` alone: the
start of a later cycle, which locks the row ``FOR UPDATE``, waits for the
fenced transaction to end, while requesters (``FOR NO KEY UPDATE``) never do.
A token larger than the cycle's means a later cycle has started:
:class:`FencedOut`. In REPEATABLE READ or SERIALIZABLE, PostgreSQL refuses to
lock a row whose newer version a later cycle's start wrote after the
transaction's snapshot (a SerializationFailure): that is a later cycle too.
"""

from __future__ import annotations

import errno
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from . import _pgtable
from ._errors import CoordinationError, FencedOut
from ._outcome import Outcome
from ._pgpool import Pool
from ._pgtable import TABLE

__all__ = ["afence", "fence"]


def fence(name: str, pool: Pool, conn: Any, token: int | OSError) -> int:
    """Fence the transaction open on ``conn`` by the cycle of ``token`` (see the module).

    Raises:
        FencedOut, TypeError, ValueError, CoordinationError: as
            :func:`sched_exclusive.fence` says.
    """
    if not isinstance(conn, psycopg.Connection):
        raise TypeError(f"fence() takes a psycopg Connection, not {type(conn).__name__}")
    query, ours = _statement(pool, conn.autocommit, token)
    try:
        row = conn.execute(query, {"name": name}).fetchone()
    except psycopg.Error as exc:
        raise _failed(name, exc, ours) from exc
    return _judge(name, pool, row, ours)


async def afence(name: str, pool: Pool, aconn: Any, token: int | OSError) -> int:
    """:func:`fence` on a ``psycopg.AsyncConnection``."""
    if not isinstance(aconn, psycopg.AsyncConnection):
        raise TypeError(f"afence() takes a psycopg AsyncConnection, not {type(aconn).__name__}")
    query, ours = _statement(pool, aconn.autocommit, token)
    try:
        cursor = await aconn.execute(query, {"name": name})
        row = await cursor.fetchone()
    except psycopg.Error as exc:
        raise _failed(name, exc, ours) from exc
    return _judge(name, pool, row, ours)


def _statement(pool: Pool, autocommit: bool, token: int | OSError) -> tuple[Any, int]:
    """The fence statement, and the cycle's token (after the checks of ``fence()``)."""
    if isinstance(token, OSError):
        raise CoordinationError.from_os_error(token, Outcome.RAN) from token
    if autocommit:
        raise ValueError(
            "fence() needs the connection's transaction, and this connection is in "
            "autocommit mode: there is none to fence (open one: conn.transaction(), or "
            "a connection with autocommit=False)"
        )
    facts = _pgtable.facts(pool)
    if facts.fence is None:
        _pgtable.learn_where(pool)
    assert facts.fence is not None
    return facts.fence, token


def _failed(name: str, exc: BaseException, token: int) -> Exception:
    if isinstance(exc, pg_errors.SerializationFailure):
        # The only key update of the row is the start of a cycle: one has
        # started since this transaction's snapshot.
        return FencedOut(name, token, None)
    if isinstance(exc, pg_errors.UndefinedTable):
        return ValueError(
            f"fence(): the database this connection reaches has no {TABLE} table: it "
            f"must be the database job {name!r} is coordinated through ({exc})"
        )
    return CoordinationError(f"fence() of job {name!r} failed: {exc}")


def _judge(name: str, pool: Pool, row: Any, token: int) -> int:
    current, present, system, database = row
    identity = _pgtable.facts(pool).identity
    if identity is None or (system, database) != identity:
        known = "unknown" if identity is None else f"database {identity[1]} of {identity[0]}"
        raise ValueError(
            f"fence(): this connection reaches another database than the one job "
            f"{name!r} is coordinated through (database {database} of system {system}, "
            f"not {known})"
        )
    if not present:
        raise CoordinationError(
            errno.ENOENT,
            f"fence(): the row of job {name!r} is gone (deleted by someone): its cycle "
            "cannot be fenced",
            outcome=Outcome.RAN,
        )
    if current is not None and int(current) > token:
        raise FencedOut(name, token, int(current))
    return token
