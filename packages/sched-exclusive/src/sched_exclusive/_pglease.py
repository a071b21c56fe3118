"""A held PostgreSQL advisory lock (the lease) and the monitor that watches it.

* **The lease** owns its session from before the lock statement runs until
  its release completes; collected without ``unlock()`` (nothing else holds
  it strongly: the monitor's reference is weak), it closes its session,
  which releases the lock. A held session serves only its holder's own
  statements (the check, the release, the start of each cycle and the look
  at the count after a run here, the acquire in :mod:`._postgres`); other
  counter statements take a pooled session of their own, so no other call,
  thread or forked child ever speaks on it.
* **Liveness.** While a lease is held, the session monitor (one thread per
  process) watches its socket and checks the session every
  :data:`SESSION_CHECK_INTERVAL` seconds; the start of each cycle proves it
  once more. A loss sets the lease's ``lost_event``.
* **Ownership.** In a process forked from the holder, releasing the lease
  closes that process's copy of the socket without a word to the server
  (:mod:`._pgsession`'s fork rule).

The check and the release run only in the session's own backend (``CASE WHEN
pg_backend_pid() = …``): a transaction pooler's other backend is refused.
"""

from __future__ import annotations

import errno
import os
import select
import threading
import time
import typing
import weakref
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from . import _pgsession
from ._pgcommit import Prepared, begin_and_run, look, send_commit, settle, settle_then
from ._pgsession import POOLING_ADVICE, Session, execute, pooling_error

if TYPE_CHECKING:
    from ._postgres import PostgresBackend

__all__ = ["SESSION_CHECK_INTERVAL", "PgLease", "watched_leases"]

#: Seconds between two checks of a held session while the job runs.
SESSION_CHECK_INTERVAL = 2.0

_RELEASE = """SELECT CASE WHEN pg_backend_pid() = %(pid)s THEN pg_advisory_unlock(%(key)s) END,
    pg_backend_pid()"""
_CHECK = "SELECT pg_backend_pid()"

#: Guards the making of a lease's event against its being set meanwhile.
_EVENT_LOCK = threading.Lock()


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
        "_committing",
        "_event",
        "_lost_reason",
        "_reported",
        "_session",
        "_turn",
    )

    def __init__(self, backend: PostgresBackend, session: Session) -> None:
        self._backend = backend
        self._lost_reason: str | None = None
        self._reported = False
        self._event: threading.Event | None = None  # made when first asked for
        self._committing = False  # run() sent the Sync that commits its start, unread
        # One statement at a time on the session, the release after any check.
        self._turn = threading.Lock()
        self._session: Session | None = session  # last: owned from here on

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
                    self._settle(session)
                    (pid,) = execute(session, self._backend.settings, _CHECK, (), doing)
                except OSError as exc:
                    self.lose(str(exc))
                else:
                    if pid != session.server_pid:
                        self.lose(
                            f"the session answered from PostgreSQL backend {pid}, not "
                            f"{session.server_pid}: {POOLING_ADVICE}"
                        )
            return self._lost_reason is None

    def run(
        self, statement: Prepared, params: dict[str, Any], doing: str
    ) -> tuple[bytes | None, ...]:
        """Run the start of a cycle on the held session, between the monitor's checks:
        in a transaction committed without waiting (see :mod:`._pgcommit`); ``params``
        gains ``pid``, the session's backend pid, for the statement to run only there.

        Raises:
            OSError: ``ENOLCK`` when the lock is lost, already or now (a broken
                session is ended as by a failed check, and the loss counts as
                reported); the server's refusal of the statement (a timeout, a
                missing table) as it is, rolled back, the lock still held.
        """
        with self._turn:
            session = self._session
            if session is None or self._lost_reason is not None:
                self._reported = True
                raise OSError(
                    errno.ENOLCK,
                    f"the cycle lock was lost before the cycle could start: {self._lost_reason}",
                )
            settings = self._backend.settings
            try:
                self._settle(session)
                # Stored, not returned, inside the block: an exception a signal
                # handler raises as the call returns must still release the turn.
                row = begin_and_run(
                    session, settings, statement, {**params, "pid": session.server_pid}, doing
                )
            except OSError as exc:
                if not (session.aborted or session.conn.broken or session.conn.closed):
                    raise  # the server refused (rolled back): the session and the lock are there
                self.lose(str(exc))
                self._reported = True
                raise OSError(errno.ENOLCK, f"the cycle lock was lost: {exc}") from exc
            except BaseException:
                self.close()  # an interrupt: no transaction, no pipeline may outlive it
                raise
            try:
                send_commit(session, settings)
            except BaseException as exc:
                self.close()  # the lock goes with the session: nothing was committed
                if not isinstance(exc, Exception):
                    raise
                raise OSError(
                    errno.ENOLCK, f"the cycle lock was lost: the start did not commit: {exc!r}"
                ) from exc
            self._committing = True
        return row

    def look(
        self, statement: Prepared, params: dict[str, Any], doing: str
    ) -> tuple[bytes | None, ...]:
        """Run one read of the holder's own on the held session: right behind the
        commit of the cycle's start, if its reply is not in yet, in the same round
        trip (so the read sees what the start wrote); ``()`` when it found no row.

        Raises:
            OSError: ``ENOLCK`` when the lock is lost; the read's failure.
        """
        with self._turn:
            session = self._session
            if session is None or self._lost_reason is not None:
                self._reported = True
                raise OSError(
                    errno.ENOLCK, f"the cycle lock was lost while the job ran: {self._lost_reason}"
                )
            try:
                if self._committing:
                    self._committing = False
                    row = settle_then(session, self._backend.settings, statement, params, doing)
                else:
                    row = look(session, self._backend.settings, statement, params, doing)
            except BaseException:
                self.close()  # whatever it was, the session's state is unknown
                raise
        return row

    def _settle(self, session: Session) -> None:
        """Read the reply to the Sync :meth:`run` sent, if one is pending."""
        if self._committing:
            self._committing = False
            settle(session, self._backend.settings)

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
                if session.owner != _pgsession.pid():
                    return  # a forked process: closing gives up its copy only
                if self._lost_reason is not None:
                    if not self._reported:
                        raise OSError(
                            errno.ENOLCK,
                            f"the cycle lock was lost while the job ran: {self._lost_reason}",
                        )
                    return
                try:
                    self._settle(session)
                except OSError as exc:
                    raise OSError(
                        errno.ENOLCK, f"the cycle lock was lost while the job ran: {exc}"
                    ) from exc
                self._release(session)
                pool.give(session)
                self._session = None
        finally:
            self.close()  # unless given back above: the lock goes with the session

    def _release(self, session: Session) -> None:
        params = {"pid": session.server_pid, "key": self._backend.key}
        try:
            released, pid = execute(
                session, self._backend.settings, _RELEASE, params, "releasing the lock"
            )
        except OSError as exc:
            raise OSError(
                exc.errno or errno.ENOLCK,
                f"the cycle lock could not be released, so its session was closed "
                f"(which releases it); the lock may have been lost during the run: {exc}",
            ) from exc
        if released is None:
            raise pooling_error(
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
                self._thread.start()
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


_STATE_LOCK = threading.Lock()
_MONITOR: _Monitor | None = None


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


def _after_fork() -> None:
    global _STATE_LOCK, _EVENT_LOCK, _MONITOR
    _STATE_LOCK = threading.Lock()
    _EVENT_LOCK = threading.Lock()
    if _MONITOR is not None:
        _MONITOR.forget()
    _MONITOR = None


_pgsession.after_fork(_after_fork)
