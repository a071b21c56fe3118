"""The PostgreSQL connection layer: sessions, deadlines, errors and the fork rule.

It knows nothing of job names, locks or counters: a :class:`Session` is one
libpq connection lent to one user at a time (by :mod:`._pgpool`), and
:func:`execute` runs one statement on it under a client-side deadline.

* **Deadlines.** Every statement carries a client-side deadline (the
  statement timeout plus :data:`ANSWER_GRACE`): past it, the deadline thread
  shuts the session's socket down, so a stalled server or network ends the
  call in bounded time.
* **Errors.** A psycopg failure becomes the backend seam's :class:`OSError`,
  keeping its text (``errno.ETIMEDOUT`` for a timeout).
* **The fork rule.** A session belongs to the process that opened it. In a
  process forked from it, the session is abandoned: this process's copy of
  its socket is closed, once, without a word to the server (that would end
  the parent's session), and nothing the parent's threads may have held
  (locks, threads, descriptors) is used again. :func:`after_fork` registers
  what each module drops; the one hook below runs them all.
"""

from __future__ import annotations

import errno
import math
import os
import select
import socket
import threading
import time
import typing
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

__all__ = [
    "ANSWER_GRACE",
    "IDENTIFY",
    "KEEPALIVES",
    "POOLING_ADVICE",
    "SETUP",
    "Session",
    "Settings",
    "abandon",
    "after_fork",
    "execute",
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

IDENTIFY = "SELECT pg_backend_pid()"
SETUP = """SELECT pg_backend_pid(),
    set_config('statement_timeout', %(statement_ms)s, false),
    set_config('tcp_keepalives_idle', %(idle)s, false),
    set_config('tcp_keepalives_interval', %(interval)s, false),
    set_config('tcp_keepalives_count', %(count)s, false),
    set_config('tcp_user_timeout', %(user_timeout)s, false)"""

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


#: This process's id (kept current across forks by the hook below).
_PID = os.getpid()
#: What each module drops in a forked child, in registration order.
_RESETS: list[Callable[[], None]] = []


def pid() -> int:
    """This process's id."""
    return _PID


def after_fork(reset: Callable[[], None]) -> None:
    """Run ``reset`` in a forked child, after this process's id is updated."""
    _RESETS.append(reset)


def _after_fork_in_child() -> None:
    """A forked process starts afresh: the parent's sessions, threads and locks are not its."""
    global _PID, _DEADLINES, _STATE_LOCK
    _STATE_LOCK = threading.Lock()
    _PID = os.getpid()
    _DEADLINES = None
    for reset in _RESETS:
        reset()


os.register_at_fork(after_in_child=_after_fork_in_child)


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

    __slots__ = ("aborted", "closed", "conn", "idle_since", "owner", "server_pid")

    def __init__(self, conn: psycopg.Connection[Any], server_pid: int) -> None:
        self.conn = conn
        self.server_pid = server_pid
        self.owner = _PID
        self.aborted = False
        self.closed = False  # closed (or abandoned) by this library: never again
        self.idle_since = 0.0

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

    def usable(self, *, look: bool = False) -> bool:
        """Whether an idle session can be lent again: not closed, and (with
        ``look``) nothing unread on its socket, which for an idle session is the
        server's goodbye (a restart, ``pg_terminate_backend``)."""
        if self.aborted or self.closed or self.conn.closed or self.conn.broken:
            return False
        fd = self.fileno()
        if not look or fd is None:
            return fd is not None
        try:
            poll = select.poll()
            poll.register(fd, select.POLLIN)
            return not poll.poll(0)
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        """Close it, once: the server ends the session, and any lock it held.

        In a process forked from its owner, close only this process's copy of
        the socket, without a word (the session stays the owner's).
        """
        if self.closed:
            return
        if self.owner != _PID:
            abandon(self)
            return
        self.closed = True
        with suppress(Exception):
            self.conn.close()


#: Sessions a forked process inherited: kept referenced, never used or closed
#: through libpq (that would end the parent's session).
_ABANDONED: list[Session] = []


def abandon(session: Session) -> None:
    """Close this process's copy of an inherited session's socket, once, without a word."""
    fd = session.fileno()
    session.closed = True  # before the close: the number may be reused at once
    if fd is not None:
        with suppress(OSError):
            os.close(fd)
    _ABANDONED.append(session)


class _Deadlines:
    """Shuts a session's socket down when a statement outlives its deadline.

    One thread per process, started on first use, asleep while nothing is
    in flight. Arming costs a dict entry under a lock; the thread is woken
    only when a deadline earlier than its next wake-up arrives.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._armed: dict[int, tuple[float, Session]] = {}
        self._tokens = 0
        self._wake_at = math.inf
        self._thread: threading.Thread | None = None

    def arm(self, session: Session, seconds: float) -> int:
        deadline = time.monotonic() + seconds
        with self._cond:
            self._tokens += 1
            token = self._tokens
            self._armed[token] = (deadline, session)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sched-exclusive-deadlines", daemon=True
                )
                self._thread.start()
            elif deadline < self._wake_at:
                self._cond.notify()
        return token

    def disarm(self, token: int) -> bool:
        """Forget ``token``; ``False`` when its deadline already fired."""
        with self._cond:
            return self._armed.pop(token, None) is not None

    def _run(self) -> None:
        while True:
            expired: list[Session] = []
            with self._cond:
                now = time.monotonic()
                for token, (deadline, session) in list(self._armed.items()):
                    if deadline <= now:
                        del self._armed[token]
                        expired.append(session)
                if not expired:
                    earliest = min((d for d, _ in self._armed.values()), default=math.inf)
                    self._wake_at = earliest
                    self._cond.wait(None if earliest == math.inf else earliest - now)
                    self._wake_at = 0.0
            for session in expired:
                session.abort()


_STATE_LOCK = threading.Lock()
_DEADLINES: _Deadlines | None = None


def _deadlines() -> _Deadlines:
    global _DEADLINES
    deadlines = _DEADLINES
    if deadlines is not None:
        return deadlines
    with _STATE_LOCK:
        if _DEADLINES is None:
            _DEADLINES = _Deadlines()
        return _DEADLINES


def os_error(exc: BaseException, settings: Settings, doing: str) -> OSError:
    """Translate a psycopg failure into the seam's OSError, keeping its text."""
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
    deadlines = _DEADLINES or _deadlines()
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
    if answer is None:
        raise OSError(errno.ENODATA, f"PostgreSQL returned no row ({doing})")
    return answer
