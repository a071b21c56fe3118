"""The start of a cycle as a transaction whose commit the holder does not wait for.

A holder that dies between its take of a request and the start of the job
it took it for has lost that request (issue 18 item 11). An autocommit
statement commits on the server before its answer travels back, so that
window would be a whole round trip. Instead the holder sends the start
statement without the protocol's Sync message (libpq's pipeline mode, with a
flush request): PostgreSQL runs it in an implicit transaction, sends its
row, and keeps the transaction open — the row locked — until the Sync
arrives. Only once the row is in does the holder send the Sync, without
waiting for its reply, and start the job. A holder dying before that leaves
nothing committed (its session ends, PostgreSQL rolls back); one dying after
it has started its job, for all that matters. The window is the time from
sending the Sync to the job's first instruction, as on flock; the server does
the same work as for an autocommit statement.

Until the Sync is processed the row stays locked ``FOR UPDATE`` (half a round
trip): a requester arriving then waits that long, and a fence waits for the
token it then reads. The Sync's reply is read before the next statement on
the session (:func:`settle`); an error there means the session, and the
lock, were lost. The statement is prepared once per connection.
"""

from __future__ import annotations

import re
import select
import typing
import weakref
from typing import Any

import psycopg
from psycopg import pq

from ._pgsession import Session, Settings, under_deadline

__all__ = ["Prepared", "begin_and_run", "look", "send_commit", "settle", "settle_then"]

_OK = pq.ExecStatus


@typing.final
class Prepared(typing.NamedTuple):
    """A statement for :func:`begin_and_run`: its name, its text with ``$n``
    placeholders, and the parameter each ``$n`` takes."""

    name: bytes
    sql: bytes
    params: tuple[str, ...]

    @classmethod
    def of(cls, name: str, query: str) -> Prepared:
        """Prepare ``query``, written with psycopg's ``%(name)s`` placeholders."""
        order: list[str] = []

        def number(match: re.Match[str]) -> str:
            if match[1] not in order:
                order.append(match[1])
            return f"${order.index(match[1]) + 1}"

        sql = re.sub(r"%\((\w+)\)s", number, query)
        return cls(name.encode(), sql.encode(), tuple(order))

    def values(self, params: dict[str, Any]) -> list[bytes | None]:
        """The parameters in the text format (``None`` is NULL)."""
        return [_text(params[name]) for name in self.params]


def _text(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, int):
        return b"%d" % value
    return str(value).encode()


#: The statements prepared on each connection.
_PREPARED: weakref.WeakKeyDictionary[psycopg.Connection[Any], set[bytes]] = (
    weakref.WeakKeyDictionary()
)


def _flush(pgconn: pq.abc.PGconn) -> None:
    while pgconn.flush():  # the socket's buffer is full: wait until it drains
        select.select([], [pgconn.socket], [])


def _result(pgconn: pq.abc.PGconn) -> pq.abc.PGresult | None:
    """The next result (``None`` between two commands' results), waiting for it."""
    while True:
        pgconn.consume_input()
        if not pgconn.is_busy():
            return pgconn.get_result()
        select.select([pgconn.socket], [], [])  # the deadline shuts the socket down


def _failure(result: pq.abc.PGresult) -> psycopg.Error:
    """The psycopg error a failed result stands for (its class from its SQLSTATE)."""
    sqlstate = (result.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
    message = (result.error_message or b"").decode(errors="replace").strip()
    try:
        kind = psycopg.errors.lookup(sqlstate)
    except KeyError:
        kind = psycopg.DatabaseError
    return kind(message)


def _to_sync(pgconn: pq.abc.PGconn, syncs: int) -> tuple[tuple[bytes | None, ...], Any]:
    """Read every result up to the reply to the ``syncs``-th Sync sent and leave
    pipeline mode; return the first row read, and the first failure (or ``None``)."""
    row: tuple[bytes | None, ...] = ()
    failure: psycopg.Error | None = None
    while syncs:
        result = _result(pgconn)
        if result is None:
            continue
        if result.status == _OK.PIPELINE_SYNC:
            syncs -= 1
        elif result.status == _OK.TUPLES_OK:
            if result.ntuples and not row:
                row = tuple(result.get_value(0, i) for i in range(result.nfields))
        elif result.status not in (_OK.COMMAND_OK, _OK.PIPELINE_ABORTED) and failure is None:
            failure = _failure(result)
    pgconn.exit_pipeline_mode()
    return row, failure


def _send(pgconn: pq.abc.PGconn, conn: Any, statement: Prepared, params: dict[str, Any]) -> bool:
    """Queue ``statement`` (prepared first on a connection that has not yet);
    return whether the Prepare was queued too."""
    prepared = _PREPARED.setdefault(conn, set())
    fresh = statement.name not in prepared
    if fresh:
        pgconn.send_prepare(statement.name, statement.sql)
    pgconn.send_query_prepared(statement.name, statement.values(params))
    return fresh


def begin_and_run(
    session: Session, settings: Settings, statement: Prepared, params: dict[str, Any], doing: str
) -> tuple[bytes | None, ...]:
    """Run ``statement`` in a transaction left open (see the module): its one row,
    each value in the text format, ``None`` for NULL. Call :func:`send_commit` next.

    Raises:
        OSError: as :func:`._pgsession.execute` does; the transaction is then
            over (rolled back) and the session out of pipeline mode, or the
            session is lost.
    """
    conn = session.conn
    pgconn = conn.pgconn

    def talk() -> tuple[bytes | None, ...]:
        pgconn.enter_pipeline_mode()
        fresh = _send(pgconn, conn, statement, params)
        pgconn.send_flush_request()
        _flush(pgconn)
        row: tuple[bytes | None, ...] = ()
        for _ in range(2 if fresh else 1):  # the Prepare's result, then the statement's
            result = _result(pgconn)
            if result is None or result.status not in (_OK.COMMAND_OK, _OK.TUPLES_OK):
                # The server skips to the Sync: the transaction is over.
                pgconn.pipeline_sync()
                _flush(pgconn)
                _, failure = _to_sync(pgconn, 1)
                if result is not None and failure is None:
                    failure = _failure(result)
                raise failure or psycopg.OperationalError(f"no answer ({doing})")
            if result.status == _OK.TUPLES_OK and result.ntuples:
                row = tuple(result.get_value(0, i) for i in range(result.nfields))
            _result(pgconn)  # the end of this command's results
        if fresh:
            _PREPARED[conn].add(statement.name)
        return row

    return under_deadline(session, settings, doing, talk)


def send_commit(session: Session, settings: Settings) -> None:
    """Send the Sync that commits the transaction :func:`begin_and_run` left open,
    and return without its reply (:func:`settle` reads it).

    Raises:
        OSError: it could not be sent (the session is gone, or its socket stayed
            full past the deadline).
    """
    pgconn = session.conn.pgconn

    def talk() -> None:
        pgconn.pipeline_sync()
        _flush(pgconn)

    under_deadline(session, settings, "committing the start of a cycle", talk)


def settle(session: Session, settings: Settings) -> None:
    """Read the reply to the Sync of :func:`send_commit`, under the deadline, and
    leave pipeline mode.

    Raises:
        OSError: the commit failed or the session is gone (the cycle's start
            was not committed: the lock was lost with the session).
    """
    pgconn = session.conn.pgconn

    def talk() -> None:
        _, failure = _to_sync(pgconn, 1)
        if failure is not None:
            raise failure

    under_deadline(session, settings, "committing the start of a cycle", talk)


def settle_then(
    session: Session, settings: Settings, statement: Prepared, params: dict[str, Any], doing: str
) -> tuple[bytes | None, ...]:
    """:func:`settle`, with ``statement`` run right after the commit in the same round
    trip; its row (``()`` when it returned none), in the text format.

    Raises:
        OSError: as :func:`settle`, or ``statement`` failed.
    """
    conn = session.conn
    pgconn = conn.pgconn

    def talk() -> tuple[bytes | None, ...]:
        return _read(pgconn, conn, statement, params, 2)  # the commit's Sync, then ours

    return under_deadline(session, settings, doing, talk)


def look(
    session: Session, settings: Settings, statement: Prepared, params: dict[str, Any], doing: str
) -> tuple[bytes | None, ...]:
    """Run ``statement`` (a read) on its own, in one round trip: its row, as
    :func:`settle_then` returns it."""
    conn = session.conn
    pgconn = conn.pgconn

    def talk() -> tuple[bytes | None, ...]:
        pgconn.enter_pipeline_mode()
        return _read(pgconn, conn, statement, params, 1)

    return under_deadline(session, settings, doing, talk)


def _read(
    pgconn: pq.abc.PGconn, conn: Any, statement: Prepared, params: dict[str, Any], syncs: int
) -> tuple[bytes | None, ...]:
    """Send ``statement`` and a Sync in pipeline mode, read up to the reply to the
    ``syncs``-th Sync outstanding, leave pipeline mode; the statement's row."""
    fresh = _send(pgconn, conn, statement, params)
    pgconn.pipeline_sync()
    _flush(pgconn)
    row, failure = _to_sync(pgconn, syncs)
    if failure is not None:
        raise failure
    if fresh:
        _PREPARED[conn].add(statement.name)
    return row
