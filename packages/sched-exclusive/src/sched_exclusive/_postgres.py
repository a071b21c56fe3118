"""The PostgreSQL backend: a session advisory lock and a counter row.

Imported only by :meth:`Exclusive.postgres` (it imports psycopg). The seam's
duties, met here:

* **The lock** is ``pg_try_advisory_lock(advisory_key(name))`` taken on a
  connection of its own (a *session*), held for the whole stretch and
  released with ``pg_advisory_unlock`` on that same session; PostgreSQL
  releases it when the session ends, whatever ended it. Advisory locks are
  re-entrant within a session, so no two holders ever share one: a session
  is lent to one user at a time by the process-wide pool.
* **The counter** is the ``queued`` column of ``name``'s row in the
  ``sched_exclusive`` table; each change is one statement that locks the row,
  returns the value before and writes only a change. No transaction is ever
  left open.
* **Ownership.** A session belongs to the process that opened it. In a
  process forked from it, releasing a lease closes that process's copy of
  the socket without a word to the server, and the inherited idle sessions
  are dropped the same way, once: the child's pools start empty. A held
  session serves only its lease's lock statements; counter statements take
  a pooled session of their own, so no other call, thread or forked child
  ever speaks on it.
* **Liveness.** While a lease is held, the session monitor (one thread per
  process) watches its socket and checks the session every
  :data:`SESSION_CHECK_INTERVAL` seconds; ``locked`` checks it once more
  before each rerun. A loss sets the lease's ``lost_event``.
* **Collection.** A lease owns its session from before the lock statement
  runs until its release completes; collected without ``unlock()`` (nothing
  else holds it strongly: the monitor's reference is weak), it closes its
  session, which releases the lock.

Every statement carries a client-side deadline (the statement timeout plus
:data:`ANSWER_GRACE`): past it, the deadline thread shuts the session's
socket down, so a stalled server or network ends the call in bounded time.

A transaction-pooling proxy runs one client session's statements in
different server sessions, which breaks session locks. Each session learns
its server backend's pid when it opens, before any setting is changed; the
lock statements (acquire, check, release) run only in that backend
(``CASE WHEN pg_backend_pid() = …``), the acquire only in a backend that
does not hold the lock already (a re-entrant win), and two sessions of this
process answering from one backend, or one session answering from another,
is refused with an error saying what to change.
"""

from __future__ import annotations

import atexit
import errno
import logging
import math
import os
import select
import socket
import threading
import time
import typing
import weakref
from collections.abc import Callable
from contextlib import suppress
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from ._advisory import advisory_key
from ._backend import Change
from ._stopwatch import start_helper

__all__ = [
    "ANSWER_GRACE",
    "SESSION_CHECK_INTERVAL",
    "TABLE",
    "PgLease",
    "PostgresBackend",
    "PostgresStatus",
    "init_table",
    "pool_for",
    "read_status",
    "watched_leases",
]

#: The table holding one row per job name.
TABLE = "sched_exclusive"
#: Seconds between two checks of a held session while the job runs.
SESSION_CHECK_INTERVAL = 2.0
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
#: Idle sessions the pool keeps per connection string.
_MAX_IDLE = 4
#: Seconds an idle session may rest before it is looked at before a loan.
_LOOK_AFTER = 1.0
#: The advisory key that serializes concurrent table creation.
_SETUP_KEY = advisory_key("sched-exclusive table setup")

_CREATE = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    name text PRIMARY KEY,
    queued bigint NOT NULL DEFAULT 0 CHECK (queued >= 0),
    holder_since timestamptz,
    holder_host text,
    holder_pid bigint
)"""
_COMMENT = (
    f"COMMENT ON TABLE {TABLE} IS 'sched-exclusive: queued rerun requests and the last "
    "holder of each job name (python -m sched_exclusive status --postgres CONNINFO NAME)'"
)
_IDENTIFY = "SELECT pg_backend_pid()"
_SETUP = """SELECT pg_backend_pid(),
    set_config('statement_timeout', %(statement_ms)s, false),
    set_config('tcp_keepalives_idle', %(idle)s, false),
    set_config('tcp_keepalives_interval', %(interval)s, false),
    set_config('tcp_keepalives_count', %(count)s, false),
    set_config('tcp_user_timeout', %(user_timeout)s, false)"""
_ENSURE_ROW = f"INSERT INTO {TABLE} (name) VALUES (%s) ON CONFLICT (name) DO NOTHING"
#: ``won`` is NULL when the statement ran in another backend than the
#: session's, or in one that holds the lock already (re-entrant: another
#: client's, behind a transaction pooler); ``held_here`` tells which.
_ACQUIRE = f"""WITH here AS (
    SELECT pg_backend_pid() = %(pid)s AS ours, EXISTS (
        SELECT FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
            AND granted AND objsubid = 1
            AND classid = %(high)s::bigint::oid AND objid = %(low)s::bigint::oid
    ) AS held_here
), probe AS (
    SELECT CASE WHEN ours AND NOT held_here THEN pg_try_advisory_lock(%(key)s) END AS won,
        held_here
    FROM here
), holder AS (
    UPDATE {TABLE} SET holder_since = now(), holder_host = %(host)s, holder_pid = %(client_pid)s
    FROM probe WHERE probe.won AND {TABLE}.name = %(name)s
)
SELECT won, pg_backend_pid(), held_here FROM probe"""
_RELEASE = """SELECT CASE WHEN pg_backend_pid() = %(pid)s THEN pg_advisory_unlock(%(key)s) END,
    pg_backend_pid()"""
_CHECK = "SELECT pg_backend_pid()"
_READ = f"SELECT queued FROM {TABLE} WHERE name = %s"
#: One statement per kind of change: lock the row, return the count before,
#: write only a change.
_CHANGES = {
    kind: f"""WITH old AS (
    SELECT queued FROM {TABLE} WHERE name = %(name)s FOR UPDATE
), new AS (
    SELECT queued AS before, {after} AS after FROM old
), written AS (
    UPDATE {TABLE} SET queued = new.after FROM new
    WHERE {TABLE}.name = %(name)s AND new.after <> new.before
)
SELECT before FROM new"""
    for kind, after in {
        "enqueue": "CASE WHEN queued < %(capacity)s THEN queued + 1 ELSE queued END",
        "take": "CASE WHEN queued > 0 THEN queued - 1 ELSE queued END",
        "clear": "0",
    }.items()
}
_STATUS = f"""SELECT q.queued, q.holder_since, q.holder_host, q.holder_pid, now()
FROM (SELECT 1) AS one LEFT JOIN {TABLE} AS q ON q.name = %s"""
_LOCK_HOLDER = """SELECT pid FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND classid = %(high)s::bigint::oid AND objid = %(low)s::bigint::oid
LIMIT 1"""

_T = TypeVar("_T")

_POOLING_ADVICE = (
    "a transaction-pooling proxy (PgBouncer pool_mode=transaction or statement, or the "
    "like) stands between this process and PostgreSQL, and it breaks the session advisory "
    "locks Exclusive.postgres relies on: connect directly to PostgreSQL, or through a pool "
    "in session mode"
)


def _pooling_error(detail: str) -> OSError:
    return OSError(errno.EPROTO, f"{detail}: {_POOLING_ADVICE}")


class _Deadlines:
    """Shuts a session's socket down when a statement outlives its deadline.

    One thread per process, started on first use, asleep while nothing is
    in flight. Arming costs a dict entry under a lock; the thread is woken
    only when a deadline earlier than its next wake-up arrives.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._armed: dict[int, tuple[float, _Session]] = {}
        self._tokens = 0
        self._wake_at = math.inf
        self._thread: threading.Thread | None = None

    def arm(self, session: _Session, seconds: float) -> int:
        deadline = time.monotonic() + seconds
        with self._cond:
            self._tokens += 1
            token = self._tokens
            self._armed[token] = (deadline, session)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sched-exclusive-deadlines", daemon=True
                )
                start_helper(self._thread)  # signals blocked: they go to the main thread
            elif deadline < self._wake_at:
                self._cond.notify()
        return token

    def disarm(self, token: int) -> bool:
        """Forget ``token``; ``False`` when its deadline already fired."""
        with self._cond:
            return self._armed.pop(token, None) is not None

    def _run(self) -> None:
        while True:
            expired: list[_Session] = []
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


@typing.final
class _Session:
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
            _abandon(self)
            return
        self.closed = True
        with suppress(Exception):
            self.conn.close()


#: Guards the making of a lease's event against its being set meanwhile.
_EVENT_LOCK = threading.Lock()
#: Sessions a forked process inherited: kept referenced, never used or closed
#: through libpq (that would end the parent's session).
_ABANDONED: list[_Session] = []


def _abandon(session: _Session) -> None:
    """Close this process's copy of an inherited session's socket, once, without a word."""
    fd = session.fileno()
    session.closed = True  # before the close: the number may be reused at once
    if fd is not None:
        with suppress(OSError):
            os.close(fd)
    _ABANDONED.append(session)


class _Pool:
    """The idle sessions of one connection string, for this process."""

    def __init__(self, settings: _Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._idle: list[_Session] = []
        self._open: dict[int, int] = {}  # server backend pid -> open sessions answering from it
        self._verified = False

    def idle_server_pids(self) -> list[int]:
        """The server backend pids of the idle sessions (for status and tests)."""
        with self._lock:
            return [session.server_pid for session in self._idle]

    def take(self) -> _Session:
        while True:
            with self._lock:
                session = self._idle.pop() if self._idle else None
            if session is None:
                return self._open_session()
            # A session idle for a while may have been ended by the server
            # meanwhile; one lent back a moment ago is as good as it was.
            if session.usable(look=time.monotonic() - session.idle_since > _LOOK_AFTER):
                return session
            self.discard(session)

    def give(self, session: _Session) -> None:
        if session.owner != _PID:
            session.close()
            return
        if not (session.aborted or session.closed or session.conn.closed):
            session.idle_since = time.monotonic()
            with self._lock:
                if len(self._idle) < _MAX_IDLE:
                    self._idle.append(session)
                    return
        self.discard(session)

    def discard(self, session: _Session) -> None:
        """Close ``session`` (any number of times: it is closed once)."""
        if session.closed:
            return
        if session.owner == _PID:
            with self._lock:
                left = self._open.get(session.server_pid, 0) - 1
                if left > 0:
                    self._open[session.server_pid] = left
                else:
                    self._open.pop(session.server_pid, None)
        session.close()

    def close_idle(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for session in idle:
            self.discard(session)

    def after_fork(self) -> None:
        """In a forked child: drop the parent's idle sessions (their sockets
        closed once, without a word) and start afresh with this process's own."""
        self._lock = threading.Lock()
        idle, self._idle = self._idle, []
        self._open = {}
        self._verified = False
        for session in idle:
            _abandon(session)

    def _open_session(self) -> _Session:
        session = self._connect()
        with self._lock:
            shared = session.server_pid in self._open
            self._open[session.server_pid] = self._open.get(session.server_pid, 0) + 1
            verify = not self._verified and not shared
            if verify:
                self._verified = True
        if shared:
            self.discard(session)
            raise _pooling_error(
                f"two connections of this process answer from one PostgreSQL backend "
                f"(pid {session.server_pid})"
            )
        try:
            if verify:
                # A pooler that hands one backend to every client shows itself
                # when a second connection opens while the first is open.
                try:
                    witness = self._open_session()
                except BaseException:
                    with self._lock:
                        self._verified = False
                    raise
                self.give(witness)
            # Only now, the session's settings: never on a pooler's backend
            # that the checks above refused.
            row = _execute(
                session, self.settings, _SETUP, self.settings.setup_params, "setting up",
                prepare=False,
            )  # fmt: skip
            if row[0] != session.server_pid:
                raise _pooling_error(
                    f"a statement of one session ran in PostgreSQL backend {row[0]}, "
                    f"not {session.server_pid}"
                )
        except BaseException:
            self.discard(session)
            raise
        return session

    def _connect(self) -> _Session:
        settings = self.settings
        try:
            conn = psycopg.connect(
                settings.conninfo,
                autocommit=True,
                prepare_threshold=0,
                **settings.connect_kwargs,
            )
        except psycopg.Error as exc:
            raise _os_error(exc, settings, "connecting") from exc
        session = _Session(conn, 0)
        try:
            # Not prepared: behind a transaction pooler, a second connection's
            # first statement may land on the first one's backend, and must
            # reach the pid comparison instead of a prepared-name clash.
            row = _execute(session, settings, _IDENTIFY, (), "connecting", prepare=False)
        except BaseException:
            session.close()
            raise
        session.server_pid = int(row[0])
        return session


class _Settings:
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


_STATE_LOCK = threading.Lock()
#: This process's id (kept current across forks by the hook below).
_PID = os.getpid()
_POOLS: dict[tuple[str, float, float], _Pool] = {}
_DEADLINES: _Deadlines | None = None
_MONITOR: _Monitor | None = None


def pool_for(conninfo: str, connect_timeout: float = 10, statement_timeout: float = 5) -> _Pool:
    """The pool of ``conninfo`` (for the CLI)."""
    return _pool(conninfo, connect_timeout, statement_timeout)


def _pool(conninfo: str, connect_timeout: float, statement_timeout: float) -> _Pool:
    key = (conninfo, connect_timeout, statement_timeout)
    with _STATE_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = _Pool(_Settings(conninfo, connect_timeout, statement_timeout))
        return pool


def _deadlines() -> _Deadlines:
    global _DEADLINES
    deadlines = _DEADLINES
    if deadlines is not None:
        return deadlines
    with _STATE_LOCK:
        if _DEADLINES is None:
            _DEADLINES = _Deadlines()
        return _DEADLINES


def _monitor() -> _Monitor:
    global _MONITOR
    monitor = _MONITOR
    if monitor is not None:
        return monitor
    with _STATE_LOCK:
        if _MONITOR is None:
            _MONITOR = _Monitor()
        return _MONITOR


def watched_leases() -> int:
    """How many held leases this process's session monitor watches (for tests)."""
    monitor = _MONITOR
    return 0 if monitor is None else monitor.watching()


def _after_fork_in_child() -> None:
    """A forked process starts afresh: the parent's sessions, threads and locks are not its."""
    global _STATE_LOCK, _EVENT_LOCK, _DEADLINES, _MONITOR, _PID
    _STATE_LOCK = threading.Lock()
    _EVENT_LOCK = threading.Lock()
    _PID = os.getpid()
    for pool in _POOLS.values():  # kept: each backend made before the fork holds its pool
        pool.after_fork()
    _DEADLINES = None
    if _MONITOR is not None:
        _MONITOR.forget()
    _MONITOR = None


def _close_idle_sessions() -> None:
    for pool in list(_POOLS.values()):
        pool.close_idle()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_idle_sessions)


def _os_error(exc: BaseException, settings: _Settings, doing: str) -> OSError:
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


def _under_deadline(
    session: _Session, settings: _Settings, doing: str, talk: Callable[[], _T]
) -> _T:
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
        raise _os_error(exc, settings, doing) from exc
    except BaseException:
        deadlines.disarm(token)
        raise
    if not deadlines.disarm(token):
        session.aborted = True  # its socket is being shut down: the answer is void
        raise OSError(errno.ETIMEDOUT, f"PostgreSQL answered too late ({doing})")
    return result


def _execute(
    session: _Session,
    settings: _Settings,
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

    answer = _under_deadline(session, settings, doing, talk)
    if answer is None:
        raise OSError(errno.ENODATA, f"PostgreSQL returned no row ({doing})")
    return answer


@typing.final
class PgLease:
    """A held advisory lock: one session, lent to the holder for the whole stretch.

    The lease owns its session from before the lock statement runs (so that
    an interrupt anywhere leaves the session to its finalizer) until its
    release completed or the session was closed.
    """

    __slots__ = (
        "__weakref__",
        "_backend",
        "_event",
        "_lost_reason",
        "_reported",
        "_session",
        "_turn",
    )

    def __init__(self, backend: PostgresBackend, session: _Session) -> None:
        self._backend = backend
        self._lost_reason: str | None = None
        self._reported = False
        self._event: threading.Event | None = None  # made when first asked for
        # One statement at a time on the session, the release after any check.
        self._turn = threading.Lock()
        self._session: _Session | None = session  # last: owned from here on

    @property
    def lost_event(self) -> threading.Event:
        """Set when the session, and the lock with it, is lost."""
        with _EVENT_LOCK:
            if self._event is None:
                self._event = threading.Event()
                if self._lost_reason is not None:
                    self._event.set()
            return self._event

    @property
    def locked(self) -> bool:
        """Whether the session still answers, from the backend that took the lock."""
        if self._session is None:
            return False
        if self.check("checking the lock"):
            return True
        self._reported = True
        return False

    def check(self, doing: str = "watching the lock") -> bool:
        """Check the session once (the monitor's, and ``locked``'s check).

        Returns:
            Whether the lock is still held; a failed check marks it lost.
        """
        with self._turn:
            session = self._session
            if session is None:
                return False
            if self._lost_reason is None:
                try:
                    (pid,) = _execute(session, self._backend.settings, _CHECK, (), doing)
                except OSError as exc:
                    self.lose(str(exc))
                else:
                    if pid != session.server_pid:
                        self.lose(
                            f"the session answered from PostgreSQL backend {pid}, not "
                            f"{session.server_pid}: {_POOLING_ADVICE}"
                        )
            return self._lost_reason is None

    def lose(self, reason: str) -> None:
        """Mark the lock lost: end the session (so that no lock outlives it) and say so."""
        with _EVENT_LOCK:
            session = self._session
            if self._lost_reason is not None or session is None:
                return
            self._lost_reason = reason
            event = self._event
        session.abort()
        if event is not None:
            event.set()
        self._backend.report_loss(reason)

    def hold(self) -> None:
        """The lock statement won: watch the session while the lock is held."""
        session = self._session
        fd = None if session is None else session.fileno()
        if fd is not None:
            _monitor().watch(self, fd)

    def give_back(self) -> None:
        """The lock statement lost: the session goes back to the pool, unused."""
        session, self._session = self._session, None
        if session is not None:
            self._backend.pool.give(session)

    def close(self) -> None:
        """Close the session (which releases any lock it holds), once."""
        session, self._session = self._session, None
        if session is not None:
            self._backend.pool.discard(session)

    def unlock(self) -> None:
        """Release the lock on its session and lend the session out again.

        Interrupted anywhere, it closes the session instead (which releases
        the lock); a second call does nothing.

        Raises:
            OSError: the session was lost while the lock was held (and that
                was not yet reported through ``locked``), or the release
                failed; the lock is released either way (the session is
                closed).
        """
        session = self._session
        if session is None:
            return
        pool = self._backend.pool
        try:
            _monitor().unwatch(self)
            with self._turn:
                if session.owner != _PID:
                    return  # a forked process: closing gives up its copy only
                if self._lost_reason is not None:
                    if not self._reported:
                        raise OSError(
                            errno.ENOLCK,
                            f"the cycle lock was lost while the job ran: {self._lost_reason}",
                        )
                    return
                self._release(session)
                pool.give(session)
                self._session = None
        finally:
            self.close()  # unless given back above: the lock goes with the session

    def _release(self, session: _Session) -> None:
        params = {"pid": session.server_pid, "key": self._backend.key}
        try:
            released, pid = _execute(
                session, self._backend.settings, _RELEASE, params, "releasing the lock"
            )
        except OSError as exc:
            raise OSError(
                exc.errno or errno.ENOLCK,
                f"the cycle lock could not be released, so its session was closed "
                f"(which releases it); the lock may have been lost during the run: {exc}",
            ) from exc
        if released is None:
            raise _pooling_error(
                f"the release ran in PostgreSQL backend {pid}, not {session.server_pid}"
            )
        if released is not True:
            raise OSError(errno.ENOLCK, "the cycle lock was not held by its session at release")

    def __del__(self) -> None:
        session = getattr(self, "_session", None)
        if session is not None:
            self._session = None
            with suppress(Exception):
                self._backend.pool.discard(session)  # closing releases the lock


class _Monitor:
    """Watches the sessions of held leases: their sockets closing, and a periodic check.

    One thread per process, started with the first lease. On Linux each held
    session's socket is registered for hang-up only (``EPOLLRDHUP``), by the
    holder itself, so the server's goodbye (``pg_terminate_backend``, a
    restart, a reset) wakes the thread at once while answers to the rules'
    own statements never do. Every :data:`SESSION_CHECK_INTERVAL` seconds the
    thread checks each held session with a statement, which also catches a
    silent network under the deadline. A lease is watched by its identity and
    weakly (a dropped lease is collected, and its finalizer releases the
    lock), with the descriptor registered when the watch began; a lost lease
    is watched no more. The thread sleeps for good once nothing has been held
    for two intervals.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # id(lease) -> (the lease, weakly; the descriptor registered for it)
        self._leases: dict[int, tuple[weakref.ref[PgLease], int]] = {}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._epoll = select.epoll() if hasattr(select, "epoll") else None
        self._hangup = getattr(select, "EPOLLRDHUP", 0) | getattr(select, "EPOLLHUP", 0)
        self._idle = True  # the thread sleeps without a timeout
        self._thread: threading.Thread | None = None

    def watching(self) -> int:
        """How many held leases are watched."""
        with self._lock:
            return sum(ref() is not None for ref, _ in self._leases.values())

    def watch(self, lease: PgLease, fd: int) -> None:
        with self._lock:
            self._leases[id(lease)] = (weakref.ref(lease), fd)
            wake = self._idle
            self._idle = False
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sched-exclusive-monitor", daemon=True
                )
                start_helper(self._thread)  # signals blocked: they go to the main thread
        if self._epoll is not None:
            with suppress(OSError):
                self._epoll.register(fd, self._hangup)
        if wake:
            with suppress(BlockingIOError):
                os.write(self._wake_w, b"\0")

    def unwatch(self, lease: PgLease) -> None:
        with self._lock:
            entry = self._leases.get(id(lease))
            if entry is None or entry[0]() is not lease:
                return
            self._drop(id(lease))

    def _drop(self, key: int) -> None:
        """Forget one entry (under the lock); its descriptor's registration goes
        too, unless another watched lease's socket has that number now."""
        _, fd = self._leases.pop(key)
        # A comprehension, not a generator: a short-circuited generator is
        # closed where CPython swallows what a signal handler raises.
        if self._epoll is not None and fd not in {other for _, other in self._leases.values()}:
            with suppress(OSError):
                self._epoll.unregister(fd)

    def forget(self) -> None:
        """Close this process's copy of the parent's descriptors (after a fork)."""
        for fd in (self._wake_r, self._wake_w):
            with suppress(OSError):
                os.close(fd)
        if self._epoll is not None:
            with suppress(OSError):
                self._epoll.close()

    def _wait(self, timeout: float | None) -> list[int]:
        """The descriptors that woke the thread (the wake pipe drained)."""
        if self._epoll is not None:
            if timeout is None:
                self._epoll.register(self._wake_r, select.EPOLLIN)
            try:
                ready = [fd for fd, _ in self._epoll.poll(-1 if timeout is None else timeout)]
            finally:
                if timeout is None:
                    with suppress(OSError):
                        self._epoll.unregister(self._wake_r)
        else:
            ready, _, _ = select.select([self._wake_r], [], [], timeout)
        if self._wake_r in ready:
            with suppress(BlockingIOError):
                os.read(self._wake_r, 4096)
        return [fd for fd in ready if fd != self._wake_r]

    def _run(self) -> None:
        quiet_since: float | None = None
        next_check = time.monotonic() + SESSION_CHECK_INTERVAL
        while True:
            now = time.monotonic()
            with self._lock:
                held = bool(self._leases)
                if held:
                    quiet_since = None
                elif quiet_since is None:
                    quiet_since = now
                linger = quiet_since is not None and now - quiet_since > 2 * SESSION_CHECK_INTERVAL
                self._idle = linger
            if linger:
                hung_up = self._wait(None)  # nothing held for a while: sleep until a watch
                next_check = time.monotonic() + SESSION_CHECK_INTERVAL
            else:
                hung_up = self._wait(max(next_check - now, 0.0))
            with self._lock:
                watched = list(self._leases.items())
            due = time.monotonic() >= next_check
            if due:
                next_check = time.monotonic() + SESSION_CHECK_INTERVAL
            for key, (ref, fd) in watched:
                lease = ref()
                if lease is not None and not (due or fd in hung_up):
                    continue
                try:
                    held = lease is not None and lease.check()
                except Exception as exc:  # the monitor must outlive any surprise
                    lease.lose(f"the session check failed: {exc!r}")  # type: ignore[union-attr]
                    held = False
                if not held:  # lost, released meanwhile, or collected: watched no more
                    with self._lock:
                        entry = self._leases.get(key)
                        if entry is not None and entry[0] is ref:
                            self._drop(key)
                del lease


@typing.final
class PostgresBackend:
    """:class:`._backend.Backend` over one PostgreSQL database and one job name."""

    def __init__(
        self,
        conninfo: str,
        name: str,
        *,
        connect_timeout: float,
        statement_timeout: float,
        logger: logging.Logger,
    ) -> None:
        self.name = name
        self.key = advisory_key(name)
        self.pool = _pool(conninfo, connect_timeout, statement_timeout)
        self.settings = self.pool.settings
        self._logger = logger
        self._row_ready = False
        self._acquire_params = {
            "key": self.key,
            "high": (self.key >> 32) & 0xFFFFFFFF,
            "low": self.key & 0xFFFFFFFF,
            "host": _HOST,
            "name": name,
        }

    def report_loss(self, reason: str) -> None:
        """Log that a held session was lost (from whichever thread noticed)."""
        if self._logger.isEnabledFor(logging.WARNING):
            self._logger.warning(
                "cycle lock session lost; the running job is no longer guarded (%s)",
                reason,
                extra={"job": self.name, "error": reason},
            )

    def _statement(
        self, session: _Session, query: str, params: Any, doing: str
    ) -> tuple[Any, ...] | None:
        """One statement about the name's row, on ``session``; ``None`` when the row is
        missing. The table is created on first use, and the row of the name too."""
        for attempt in (1, 2):
            try:
                if not self._row_ready:
                    _execute(
                        session, self.settings, _ENSURE_ROW, (self.name,), "preparing the row",
                        row=False,
                    )  # fmt: skip
                    self._row_ready = True
                return _execute(session, self.settings, query, params, doing)
            except OSError as exc:
                if attempt == 2:
                    if exc.errno == errno.ENODATA:
                        return None
                    raise
                if exc.errno == errno.ENODATA:
                    self._row_ready = False  # the row was deleted: put it back
                elif isinstance(exc.__cause__, pg_errors.UndefinedTable):
                    init_table(self.pool)
                else:
                    raise
        return None  # pragma: no cover - the loop returns or raises

    def _run(self, query: str, params: Any, doing: str) -> tuple[Any, ...] | None:
        """One counter statement on a pooled session (never a held one: that one
        serves only its lease's lock statements, whichever thread, task or forked
        child asks); ``None`` when the row is missing."""
        session = self.pool.take()
        try:
            row = self._statement(session, query, params, doing)
        except BaseException:
            self.pool.discard(session)
            raise
        self.pool.give(session)
        return row

    def try_acquire(self) -> PgLease | None:
        session = self.pool.take()
        lease = PgLease(self, session)  # owns the session before the lock statement runs
        try:
            params = {**self._acquire_params, "pid": session.server_pid, "client_pid": _PID}
            row = self._statement(session, _ACQUIRE, params, "taking the lock")
            won, pid, held_here = row or (None, None, None)
            if won is None:
                raise _pooling_error(
                    f"the lock is already held by PostgreSQL backend {pid}, which answered "
                    f"this session's statement: another client's session, through the same "
                    f"server connection"
                    if held_here
                    else f"a statement of one session ran in PostgreSQL backend {pid}, "
                    f"not {session.server_pid}"
                )
            if won:
                lease.hold()
                return lease
            lease.give_back()
            return None
        except BaseException:
            lease.close()  # the lock may have been taken: closing releases it
            raise

    def read_counter(self) -> int:
        row = self._run(_READ, (self.name,), "reading the counter")
        return 0 if row is None else max(int(row[0]), 0)

    def update_counter(self, fn: Change) -> int:
        params = {"name": self.name, "capacity": fn.capacity}
        row = self._run(_CHANGES[fn.kind], params, "changing the counter")
        if row is None:
            raise OSError(errno.ENODATA, f"the counter row of {self.name!r} is missing")
        return max(int(row[0]), 0)


_HOST = socket.gethostname()


def init_table(pool: _Pool) -> str:
    """Create the table if it does not exist (idempotent, safe to race).

    Returns:
        Where the table is: ``schema.table`` as PostgreSQL resolves it.

    Raises:
        OSError: it could not be created (the role may not create tables:
            run ``python -m sched_exclusive init-postgres`` as one that may).
    """
    session = pool.take()
    conn = session.conn

    def create() -> Any:
        with conn.transaction():
            # Two first users at once: CREATE TABLE IF NOT EXISTS alone can
            # still collide on the catalog; the transaction lock serializes.
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SETUP_KEY,))
            conn.execute(_CREATE)
            conn.execute(_COMMENT)
            return conn.execute(
                "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.oid = to_regclass(%s)",
                (TABLE,),
            ).fetchone()

    try:
        row = _under_deadline(session, pool.settings, "creating the table", create)
    except OSError as exc:
        pool.discard(session)
        if isinstance(exc.__cause__, pg_errors.InsufficientPrivilege):
            raise OSError(
                errno.EACCES,
                f"PostgreSQL refused to create the {TABLE} table ({exc.__cause__}); create it "
                "once as a role that may (python -m sched_exclusive init-postgres CONNINFO), "
                f"then grant SELECT, INSERT, UPDATE on {TABLE} to this one",
            ) from exc.__cause__
        raise
    except BaseException:
        pool.discard(session)
        raise
    pool.give(session)
    return f"{row[0] if row else 'public'}.{TABLE}"


@typing.final
class PostgresStatus(typing.NamedTuple):
    """A snapshot of one job name in PostgreSQL."""

    name: str
    #: ``"running"`` or ``"idle"``.
    state: str
    #: When the current (or, if idle, the last) holder took the lock (server time).
    since: datetime | None
    #: Whole seconds the current cycle has been running; ``None`` unless running.
    running_for: int | None
    #: The host and process id the holder recorded (``None`` when unknown).
    host: str | None
    pid: int | None
    #: The PostgreSQL backend pid holding the lock, when running.
    backend_pid: int | None
    #: Queued rerun requests.
    pending: int
    #: What a human should know.
    notes: tuple[str, ...] = ()


def read_status(
    conninfo: str, name: str, *, connect_timeout: float = 10, statement_timeout: float = 5
) -> PostgresStatus:
    """Read ``name``'s state without taking its lock (``pg_locks`` and its row).

    Raises:
        OSError: the database could not be reached or read.
    """
    pool = _pool(conninfo, connect_timeout, statement_timeout)
    key = advisory_key(name)
    session = pool.take()
    try:
        holder = _execute(
            session,
            pool.settings,
            f"SELECT ({_LOCK_HOLDER}), now()",
            {"high": (key >> 32) & 0xFFFFFFFF, "low": key & 0xFFFFFFFF},
            "reading pg_locks",
        )
        notes: tuple[str, ...] = ()
        try:
            queued, since, host, pid, _ = _execute(
                session, pool.settings, _STATUS, (name,), "reading the row"
            )
        except OSError as exc:
            if not isinstance(exc.__cause__, pg_errors.UndefinedTable):
                raise
            queued = since = host = pid = None
            notes = (f"the {TABLE} table does not exist yet (it is created on first use)",)
    except BaseException:
        pool.discard(session)
        raise
    pool.give(session)
    backend_pid, now = holder
    running = backend_pid is not None
    running_for = None
    if running and since is not None:
        running_for = max(int((now - since).total_seconds()), 0)
    return PostgresStatus(
        name,
        "running" if running else "idle",
        since,
        running_for,
        host,
        None if pid is None else int(pid),
        backend_pid,
        0 if queued is None else int(queued),
        notes,
    )
