"""The process's pools of PostgreSQL sessions, and the pooler check.

One pool per connection string (and timeouts), for this process: it lends
each idle session to one user at a time, looks at one that rested a while
before lending it again, and keeps at most :data:`_MAX_IDLE`.

**The pooler check.** A transaction-pooling proxy runs one client session's
statements in different server sessions, which breaks session locks. Each
session learns its server backend's pid when it opens, before any setting
is changed; two sessions of this process answering from one backend is
refused with an error saying what to change, and so is the setup statement
answering from another backend than the session's. (The lock statements
themselves check the backend too: :mod:`._pglease`, :mod:`._postgres`.)
"""

from __future__ import annotations

import atexit
import threading
import time

import psycopg

from . import _pgsession
from ._pgsession import (
    IDENTIFY,
    SETUP,
    Session,
    Settings,
    abandon,
    execute,
    os_error,
    pooling_error,
)

__all__ = ["Pool", "pool", "pool_for"]

#: Idle sessions the pool keeps per connection string.
_MAX_IDLE = 4
#: Seconds an idle session may rest before it is looked at before a loan.
_LOOK_AFTER = 1.0


class Pool:
    """The idle sessions of one connection string, for this process."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._idle: list[Session] = []
        self._open: dict[int, int] = {}  # server backend pid -> open sessions answering from it
        self._verified = False

    def idle_server_pids(self) -> list[int]:
        """The server backend pids of the idle sessions (for status and tests)."""
        with self._lock:
            return [session.server_pid for session in self._idle]

    def take(self) -> Session:
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

    def give(self, session: Session) -> None:
        if session.owner != _pgsession.pid():
            session.close()
            return
        if not (session.aborted or session.closed or session.conn.closed):
            session.idle_since = time.monotonic()
            with self._lock:
                if len(self._idle) < _MAX_IDLE:
                    self._idle.append(session)
                    return
        self.discard(session)

    def discard(self, session: Session) -> None:
        """Close ``session`` (any number of times: it is closed once)."""
        if session.closed:
            return
        if session.owner == _pgsession.pid():
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
            abandon(session)

    def _open_session(self) -> Session:
        session = self._connect()
        with self._lock:
            shared = session.server_pid in self._open
            self._open[session.server_pid] = self._open.get(session.server_pid, 0) + 1
            verify = not self._verified and not shared
            if verify:
                self._verified = True
        if shared:
            self.discard(session)
            raise pooling_error(
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
            row = execute(
                session, self.settings, SETUP, self.settings.setup_params, "setting up",
                prepare=False,
            )  # fmt: skip
            if row[0] != session.server_pid:
                raise pooling_error(
                    f"a statement of one session ran in PostgreSQL backend {row[0]}, "
                    f"not {session.server_pid}"
                )
        except BaseException:
            self.discard(session)
            raise
        return session

    def _connect(self) -> Session:
        settings = self.settings
        try:
            conn = psycopg.connect(
                settings.conninfo,
                autocommit=True,
                prepare_threshold=0,
                **settings.connect_kwargs,
            )
        except psycopg.Error as exc:
            raise os_error(exc, settings, "connecting") from exc
        session = Session(conn, 0)
        try:
            # Not prepared: behind a transaction pooler, a second connection's
            # first statement may land on the first one's backend, and must
            # reach the pid comparison instead of a prepared-name clash.
            row = execute(session, settings, IDENTIFY, (), "connecting", prepare=False)
        except BaseException:
            session.close()
            raise
        session.server_pid = int(row[0])
        return session


_STATE_LOCK = threading.Lock()
_POOLS: dict[tuple[str, float, float], Pool] = {}


def pool_for(conninfo: str, connect_timeout: float = 10, statement_timeout: float = 5) -> Pool:
    """The pool of ``conninfo`` (for the CLI)."""
    return pool(conninfo, connect_timeout, statement_timeout)


def pool(conninfo: str, connect_timeout: float, statement_timeout: float) -> Pool:
    """This process's pool of ``conninfo`` with these timeouts, made on first use."""
    key = (conninfo, connect_timeout, statement_timeout)
    with _STATE_LOCK:
        found = _POOLS.get(key)
        if found is None:
            found = _POOLS[key] = Pool(Settings(conninfo, connect_timeout, statement_timeout))
        return found


def _after_fork() -> None:
    global _STATE_LOCK
    _STATE_LOCK = threading.Lock()
    for each in _POOLS.values():  # kept: each backend made before the fork holds its pool
        each.after_fork()


def close_idle_sessions() -> None:
    """Close the idle sessions of every pool of this process (at exit, and for tests)."""
    for each in list(_POOLS.values()):
        each.close_idle()


_pgsession.after_fork(_after_fork)
atexit.register(close_idle_sessions)
