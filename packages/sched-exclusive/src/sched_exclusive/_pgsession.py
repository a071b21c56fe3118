"""The PostgreSQL connection layer: settings, sessions, statements under a deadline.

It knows nothing of job names, locks or counters: a :class:`Session` is one
libpq connection lent to one user at a time (by :mod:`._pgpool`), and
:func:`execute` runs one statement on it under a client-side deadline.

* **Deadlines.** Every statement carries a client-side deadline (the
  statement timeout plus :data:`ANSWER_GRACE`): past it, the deadline thread
  shuts the session's socket down, so a stalled server or network ends the
  call in bounded time.
* **Errors.** A psycopg failure becomes the backend seam's :class:`OSError`,
  keeping its text (``errno.ETIMEDOUT`` for a timeout).
* **Ownership.** A session belongs to the process that opened it: see the
  fork rule in :mod:`._pgprocess`; the deadline thread is :mod:`._pgdeadline`.
"""

from __future__ import annotations

import errno
import math
import os
import secrets
import select
import socket
import typing
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from . import _pgdeadline
from ._pgprocess import abandon, after_fork, inherited, pid

__all__ = [
    "ANSWER_GRACE",
    "CLIENT_SETTING",
    "IDENTIFY",
    "KEEPALIVES",
    "OURS",
    "POOLING_ADVICE",
    "SETUP",
    "Session",
    "Settings",
    "abandon",
    "after_fork",
    "elsewhere",
    "ended_idle",
    "execute",
    "inherited",
    "os_error",
    "pid",
    "pooling_error",
    "under_deadline",
]

#: Seconds the client waits for an answer past the statement timeout.
ANSWER_GRACE = 1.0
#: Keepalive defaults, client-side and (for each session) server-side,
#: unless the connection string sets them: (idle s, interval s, count, user timeout ms).
KEEPALIVES = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "25000",
}

#: The session setting that marks a server session as one client session's:
#: a random token, set up once; a pooler that hands server sessions to other
#: clients without resetting them shows it to them (see :mod:`._pgpool`).
CLIENT_SETTING = "sched_exclusive.client"
#: The server session's backend and the token a former client left in it
#: (``NULL`` in a new session, ``''`` in one a pooler reset).
IDENTIFY = f"SELECT pg_backend_pid(), current_setting('{CLIENT_SETTING}', true)"
#: A session's settings: its token, the statement timeout, the keepalives,
#: and no idle-session timeout (PostgreSQL 14 and later): a holder's session
#: rests idle for the whole job, and must not be ended for it.
SETUP = f"""SELECT pg_backend_pid(),
    set_config('{CLIENT_SETTING}', %(token)s, false),
    set_config('statement_timeout', %(statement_ms)s, false),
    set_config('tcp_keepalives_idle', %(idle)s, false),
    set_config('tcp_keepalives_interval', %(interval)s, false),
    set_config('tcp_keepalives_count', %(count)s, false),
    set_config('tcp_user_timeout', %(user_timeout)s, false),
    CASE WHEN current_setting('server_version_num')::int >= 140000
        THEN set_config('idle_session_timeout', '0', false) END"""
#: A lock statement runs only where its session's lock lives: in the
#: session's own backend, still carrying the session's token.
OURS = f"pg_backend_pid() = %(pid)s AND current_setting('{CLIENT_SETTING}', true) = %(token)s"

_T = TypeVar("_T")

POOLING_ADVICE = (
    "a transaction-pooling proxy (PgBouncer pool_mode=transaction or statement, or the "
    "like) stands between this process and PostgreSQL, and it breaks the session advisory "
    "locks Exclusive.postgres relies on: connect directly to PostgreSQL, or through a pool "
    "in session mode"
)


def pooling_error(detail: str) -> OSError:
    """The error that refuses a transaction pooler, saying what to change."""
    return OSError(errno.EPROTO, f"{detail}: {POOLING_ADVICE}")


#: Errors only a pooler that mixes client sessions on one server session
#: causes: a prepared statement of this connection's missing, or another's
#: name already taken.
_POOLER_SIGNS = (pg_errors.DuplicatePreparedStatement, pg_errors.InvalidSqlStatementName)
#: What the server says when it ends a session that was idle (or aborts the
#: statement it ran, uncommitted): terminated, shut down, crashed, idle too long.
_ENDED = (pg_errors.AdminShutdown, pg_errors.CrashShutdown, pg_errors.IdleSessionTimeout)


def elsewhere(session: Session, pid: int) -> str:
    """What it means that a statement of ``session`` answered from backend ``pid``
    without the session's mark (a pooler at work)."""
    if pid == session.server_pid:
        return (
            f"a statement of one session ran in its PostgreSQL backend {pid}, which "
            "another client's session has used meanwhile"
        )
    return f"a statement of one session ran in PostgreSQL backend {pid}, not {session.server_pid}"


class Settings:
    """What one connection string and its timeouts resolve to."""

    def __init__(self, conninfo: str, connect_timeout: float, statement_timeout: float) -> None:
        self.conninfo = conninfo
        self.statement_timeout = statement_timeout
        self.deadline = statement_timeout + ANSWER_GRACE
        try:
            given = conninfo_to_dict(conninfo)
        except psycopg.Error as exc:
            raise ValueError(f"conninfo is not a libpq connection string: {exc}") from None
        kwargs: dict[str, Any] = {"connect_timeout": str(max(2, math.ceil(connect_timeout)))}
        for key, value in KEEPALIVES.items():
            if key not in given:
                kwargs[key] = value
        if "application_name" not in given and "PGAPPNAME" not in os.environ:
            kwargs["application_name"] = "sched_exclusive"
        self.connect_kwargs = kwargs

        def effective(key: str) -> str:
            return str(given.get(key, KEEPALIVES[key]))

        self.setup_params = {
            "statement_ms": str(max(1, math.ceil(statement_timeout * 1000))),
            "idle": effective("keepalives_idle"),
            "interval": effective("keepalives_interval"),
            "count": effective("keepalives_count"),
            "user_timeout": effective("tcp_user_timeout"),
        }


@typing.final
class Session:
    """One connection, lent to one user at a time."""

    __slots__ = (
        "__weakref__",
        "aborted",
        "closed",
        "conn",
        "lent_idle",
        "owner",
        "server_pid",
        "token",
    )

    def __init__(self, conn: psycopg.Connection[Any], server_pid: int) -> None:
        self.conn = conn
        self.server_pid = server_pid
        self.owner = pid()
        self.aborted = False
        self.closed = False  # closed (or abandoned) by this library: never again
        #: Lent from the idle ones, and no statement answered since.
        self.lent_idle = False
        #: This client session's mark in its server session (see CLIENT_SETTING).
        self.token = secrets.token_hex(8)

    @property
    def identity(self) -> dict[str, Any]:
        """The parameters of :data:`OURS` for this session."""
        return {"pid": self.server_pid, "token": self.token}

    def fileno(self) -> int | None:
        """The socket's descriptor, or ``None`` once the connection is closed."""
        if self.closed:
            return None
        try:
            return self.conn.fileno()
        except psycopg.Error:
            return None

    def abort(self) -> None:
        """Shut the socket down under whoever waits on it (any thread)."""
        self.aborted = True
        fd = self.fileno()
        if fd is not None:
            with suppress(OSError), socket.socket(fileno=os.dup(fd)) as dup:
                dup.shutdown(socket.SHUT_RDWR)

    def usable(self, events: int = select.POLLIN) -> bool:
        """Whether the session is open and none of ``events`` is pending on its
        socket. For an idle session anything readable is the server's goodbye (a
        restart, ``pg_terminate_backend``); for a busy one, a hang-up is
        (``POLLRDHUP``: the server closed its end)."""
        if self.aborted or self.closed or self.conn.closed or self.conn.broken:
            return False
        fd = self.fileno()
        if fd is None:
            return False
        try:
            poll = select.poll()
            poll.register(fd, events)
            return not poll.poll(0)
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        """Close it, once: the server ends the session, and any lock it held.

        An inherited session (the fork rule) is abandoned instead.
        """
        if self.closed:
            return
        if inherited(self):
            abandon(self)
            return
        self.closed = True
        with suppress(Exception):
            self.conn.close()


def ended_idle(session: Session, exc: OSError) -> bool:
    """Whether ``exc``, from the first statement on ``session`` since it was lent
    from the idle ones, says the server had ended the session (so the statement did
    not run, or ran uncommitted): the call may go on on another session."""
    return session.lent_idle and isinstance(exc.__cause__, _ENDED)


def os_error(exc: BaseException, settings: Settings, doing: str) -> OSError:
    """Translate a psycopg failure into the seam's OSError, keeping its text."""
    if isinstance(exc, _POOLER_SIGNS):
        return pooling_error(f"PostgreSQL failed ({doing}): {str(exc).strip()}")
    if isinstance(exc, pg_errors.QueryCanceled):
        return OSError(
            errno.ETIMEDOUT,
            f"PostgreSQL statement timed out ({doing}) after the statement_timeout of "
            f"{settings.statement_timeout:g} s: {exc}",
        )
    if isinstance(exc, psycopg.errors.ConnectionTimeout):
        return OSError(errno.ETIMEDOUT, f"PostgreSQL unreachable ({doing}): {exc}")
    text = str(exc).strip() or type(exc).__name__
    return OSError(f"PostgreSQL failed ({doing}): {text}")


def under_deadline(session: Session, settings: Settings, doing: str, talk: Callable[[], _T]) -> _T:
    """Run ``talk`` (one exchange on ``session``) under the client-side deadline.

    Raises:
        OSError: it failed (its psycopg error translated), or the deadline
            fired (``errno.ETIMEDOUT``; the session is abandoned).
    """
    deadlines = _pgdeadline.deadlines()
    token = deadlines.arm(session, settings.deadline)
    try:
        result = talk()
    except psycopg.Error as exc:
        if not deadlines.disarm(token) or session.aborted:
            raise OSError(
                errno.ETIMEDOUT,
                f"PostgreSQL did not answer ({doing}) within {settings.deadline:g} s "
                f"(statement_timeout {settings.statement_timeout:g} s + {ANSWER_GRACE:g} s); "
                "the session was abandoned",
            ) from exc
        raise os_error(exc, settings, doing) from exc
    except BaseException:
        deadlines.disarm(token)
        raise
    if not deadlines.disarm(token):
        session.aborted = True  # its socket is being shut down: the answer is void
        raise OSError(errno.ETIMEDOUT, f"PostgreSQL answered too late ({doing})")
    return result


def execute(
    session: Session,
    settings: Settings,
    query: str,
    params: Any,
    doing: str = "a statement",
    *,
    prepare: bool | None = None,
    row: bool = True,
) -> tuple[Any, ...]:
    """Run one statement on ``session`` under its deadline; return its one row
    (``()`` for a statement that returns none, with ``row=False``).

    Raises:
        OSError: the statement failed, timed out, or returned no row
            (``errno.ENODATA``).
    """

    def talk() -> tuple[Any, ...] | None:
        cursor = session.conn.execute(query, params, prepare=prepare)
        if not row:
            return ()
        found = cursor.fetchone()
        return None if found is None else tuple(found)

    answer = under_deadline(session, settings, doing, talk)
    session.lent_idle = False
    if answer is None:
        raise OSError(errno.ENODATA, f"PostgreSQL returned no row ({doing})")
    return answer
