"""The process's pools of PostgreSQL sessions, and the pooler check.

One pool per connection string (and timeouts), for this process: it lends
each idle session to one user at a time, looks at its socket before lending
it again (an idle session the server ended has its goodbye waiting there),
and keeps at most :data:`_MAX_IDLE`. A session the server ended in the
instant between that look and its first statement fails with the server's
word for it (:func:`._pgsession.ended_idle`): its user takes another.

**The pooler check.** A transaction-pooling proxy runs one client session's
statements in different server sessions, which breaks session locks. Each
session learns its server backend's pid when it opens, before any setting
is changed, and the mark (a random token) a former client of this library
left in that server session, if any. It is refused, with an error saying
what to change, when

* the server session carries another client's mark: a pooler hands server
  sessions from client to client without resetting them (transaction or
  statement pooling, or session pooling with an empty
  ``server_reset_query``, which also hands a dead holder's lock on);
* another open session of this process answers from the same backend (its
  socket not hung up: a backend that ended may lend its pid to a new one);
* the setup statement answers from another backend than the session's.

The lock statements check the backend and the mark too (:mod:`._pglease`,
:mod:`._postgres`). The accounting of open sessions is the set of live
session objects, so an interrupt that drops one leaves nothing stale.
"""

from __future__ import annotations

import atexit
import select
import threading
import weakref

import psycopg

from . import _pgprocess
from ._pgprocess import abandon, inherited
from ._pgsession import (
    IDENTIFY,
    SETUP,
    Session,
    Settings,
    elsewhere,
    ended_idle,
    execute,
    os_error,
    pooling_error,
)

__all__ = ["Pool", "pool", "pool_for"]

#: Idle sessions the pool keeps per connection string.
_MAX_IDLE = 4
#: A hang-up on a session's socket: the server (or a proxy) closed its end.
_HUNG_UP = select.POLLRDHUP | select.POLLHUP | select.POLLERR


class Pool:
    """The idle sessions of one connection string, for this process."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._idle: list[Session] = []
        self._open: weakref.WeakSet[Session] = weakref.WeakSet()  # this process's, not closed

    def idle_server_pids(self) -> list[int]:
        """The server backend pids of the idle sessions (for status and tests)."""
        with self._lock:
            return [session.server_pid for session in self._idle]

    def open_server_pids(self) -> list[int]:
        """The server backend pids of this process's open sessions (for tests)."""
        with self._lock:
            return sorted(s.server_pid for s in self._open if not s.closed)

    def take(self) -> Session:
        while True:
            with self._lock:
                session = self._idle.pop() if self._idle else None
            if session is None:
                return self._open_session()
            if session.usable():  # nothing unread: no goodbye from the server
                session.lent_idle = True
                return session
            self.discard(session)

    def give(self, session: Session) -> None:
        if not (session.aborted or session.closed or session.conn.closed or inherited(session)):
            with self._lock:
                if len(self._idle) < _MAX_IDLE:
                    self._idle.append(session)
                    return
        self.discard(session)

    def discard(self, session: Session) -> None:
        """Close ``session`` (any number of times: it is closed once)."""
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
        self._open = weakref.WeakSet()
        for session in idle:
            abandon(session)

    def _sharing(self, session: Session) -> bool:
        """Whether another open session of this process answers from ``session``'s
        backend (under the lock)."""
        return any(
            other is not session
            and other.server_pid == session.server_pid
            and not inherited(other)
            and other.usable(_HUNG_UP)
            for other in list(self._open)
        )

    def _open_session(self, *, prove: bool = True) -> Session:
        session, prior = self._connect()
        with self._lock:
            shared = self._sharing(session)
            self._open.add(session)
        witness: Session | None = None
        try:
            if prior:
                raise pooling_error(
                    f"PostgreSQL backend {session.server_pid} still carries the mark of "
                    "another client of this library: a pooler hands server sessions on "
                    "without resetting them (PgBouncer in transaction or statement mode, "
                    "or in session mode with an empty server_reset_query, which also hands "
                    "a dead holder's lock to the next client)"
                )
            if shared:
                raise pooling_error(
                    f"two connections of this process answer from one PostgreSQL backend "
                    f"(pid {session.server_pid})"
                )
            if prove:
                # A pooler that lends a released backend to the next client shows
                # itself when another connection opens while this one rests.
                with self._lock:
                    witness = self._idle.pop() if self._idle else None
                if witness is not None and witness.usable():
                    witness.lent_idle = True
                else:
                    if witness is not None:
                        self.discard(witness)
                    witness = self._open_session(prove=False)
            # Only now, the session's settings: never on a pooler's backend
            # that the checks above refused.
            params = {**self.settings.setup_params, "token": session.token}
            row = execute(session, self.settings, SETUP, params, "setting up", prepare=False)
            if row[0] != session.server_pid:
                raise pooling_error(
                    f"a statement of one session ran in PostgreSQL backend {row[0]}, "
                    f"not {session.server_pid}"
                )
            if witness is not None:
                try:
                    self._prove(session, witness)
                except OSError as exc:
                    if not ended_idle(witness, exc):
                        raise
                    self.discard(witness)  # the server ended it while it rested
                    witness = self._open_session(prove=False)
                    self._prove(session, witness)
        except BaseException:
            self.discard(session)
            if witness is not None:
                self.discard(witness)
            raise
        if witness is not None:
            self.give(witness)
        return session

    def _prove(self, session: Session, witness: Session) -> None:
        """Show that ``session`` keeps its backend while another connection of this
        process holds one: the witness opens a transaction (which pins it to a server
        session even behind a transaction pooler, which would lend it the backend
        ``session`` just released), then each must answer from its own backend,
        carrying its own mark."""
        settings = self.settings
        try:
            execute(witness, settings, "BEGIN", (), "proving the session", prepare=False, row=False)
        except OSError as exc:
            if "pooling mode" in str(exc):  # PgBouncer in statement mode refuses it
                raise pooling_error(str(exc)) from exc
            raise
        for each in (witness, session):
            pid, token = execute(each, settings, IDENTIFY, (), "proving the session", prepare=False)
            if (pid, token) != (each.server_pid, each.token):
                raise pooling_error(elsewhere(each, pid))
        execute(witness, settings, "ROLLBACK", (), "proving the session", prepare=False, row=False)

    def _connect(self) -> tuple[Session, str | None]:
        """A new connection, and the mark a former client left in its server session."""
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
        return session, row[1]


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


_pgprocess.after_fork(_after_fork)
atexit.register(close_idle_sessions)
