"""The start of a cycle as a transaction whose commit the holder does not wait for.

A holder that dies between its take of a request and the start of the job
it took it for has lost that request (issue 18 item 11). An autocommit
statement commits on the server before its answer travels back, so that
window would be a whole round trip. Instead the start runs inside a
transaction (``BEGIN`` and the statement, one round trip), and only once its
answer is in does the holder send ``COMMIT`` — without waiting for the reply
— and start the job: a holder dying before that leaves nothing committed
(its session ends, PostgreSQL rolls back), one dying after it has started
its job for all that matters. The window is the time from sending ``COMMIT``
to the job's first instruction, as on flock.

Until ``COMMIT`` is processed the row stays locked ``FOR UPDATE`` (half a
round trip): requesters wait that long, and a fence waits for the token it
then reads. The reply is read before the next statement on the session
(:func:`settle`): a failed ``COMMIT`` means the session, and the lock, were
lost.
"""

from __future__ import annotations

import select
from typing import Any

import psycopg
from psycopg import pq

from ._pgsession import Session, Settings, under_deadline

__all__ = ["begin_and_run", "rollback", "send_commit", "settle"]


def begin_and_run(
    session: Session, settings: Settings, query: str, params: Any, doing: str
) -> tuple[Any, ...]:
    """``BEGIN`` and ``query`` in one round trip (client-side binding: the simple
    protocol carries both); the transaction stays open. Returns ``query``'s row.

    Raises:
        OSError: as :func:`._pgsession.execute` (the transaction is then
            aborted: :func:`rollback` it if the session lives).
    """

    def talk() -> tuple[Any, ...] | None:
        cursor = psycopg.ClientCursor(session.conn)
        cursor.execute("BEGIN; " + query, params)
        cursor.nextset()
        found = cursor.fetchone()
        return None if found is None else tuple(found)

    row = under_deadline(session, settings, doing, talk)
    if row is None:  # pragma: no cover - the start statement always returns its row
        raise OSError(f"PostgreSQL returned no row ({doing})")
    return row


def rollback(session: Session, settings: Settings) -> None:
    """End the transaction :func:`begin_and_run` left aborted by an error."""
    under_deadline(session, settings, "rolling back", lambda: session.conn.execute("ROLLBACK"))


def send_commit(session: Session) -> None:
    """Send ``COMMIT``, and return without its reply (:func:`settle` reads it)."""
    pgconn = session.conn.pgconn
    pgconn.send_query(b"COMMIT")
    while pgconn.flush():  # the socket's buffer is full: wait until it drains
        select.select([], [pgconn.socket], [])


def settle(session: Session, settings: Settings) -> None:
    """Read the reply to the ``COMMIT`` of :func:`send_commit`, under the deadline.

    Raises:
        OSError: the commit failed or the session is gone (the cycle's start
            was not committed: the lock was lost with the session).
    """
    pgconn = session.conn.pgconn

    def talk() -> None:
        while True:
            pgconn.consume_input()
            if not pgconn.is_busy():
                break
            select.select([pgconn.socket], [], [])  # the deadline shuts the socket down
        failure = None
        while (result := pgconn.get_result()) is not None:
            if result.status != pq.ExecStatus.COMMAND_OK:
                failure = (result.error_message or b"").decode(errors="replace").strip()
        if failure is not None:
            raise psycopg.OperationalError(f"the start of the cycle did not commit: {failure}")

    under_deadline(session, settings, "committing the start of a cycle", talk)
