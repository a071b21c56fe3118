"""A held PostgreSQL advisory lock (the lease) and the monitor that watches it.

* **The lease** owns its session from before the lock statement runs until
  its release completes; collected without ``unlock()`` (nothing else holds
  it strongly: the monitor's reference is weak), it closes its session,
  which releases the lock. A held session serves only its holder's own
  statements (the check, the release, the start of each cycle and the look
  at the count after a run here, the acquire in :mod:`._postgres`); other
  counter statements take a pooled session of their own, so no other call,
  thread or forked child ever speaks on it.
* **Liveness.** While a lease is held, the session monitor
  (:mod:`._pgmonitor`, which holds the loss bound) watches its socket and
  checks the session every 2 seconds; the start of each cycle proves it
  once more. A loss sets the lease's ``lost_event``.
* **Ownership.** In a process forked from the holder, the lease is the
  parent's: its release abandons this process's copy of the session and its
  check answers ``False``, at once, without taking the lease's turn (which a
  check of the parent's may have held at the fork): :mod:`._pgsession`'s
  fork rule.

The check and the release run only in the session's own backend, still
carrying the session's mark (:data:`._pgsession.OURS`): a transaction
pooler's other backend is refused, and the lock such a pooler stranded in
the session's backend is freed by ending that backend, when it still holds
the lock (a pooler's server connection that no client can reach any more).
"""

from __future__ import annotations

import errno
import threading
import typing
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from . import _pgprocess
from ._pgcommit import Prepared, begin_and_run, look, send_commit, settle, settle_then
from ._pgmonitor import monitor
from ._pgprocess import abandon, inherited
from ._pgsession import OURS, POOLING_ADVICE, Session, elsewhere, execute, pooling_error

if TYPE_CHECKING:
    from ._postgres import PostgresBackend

__all__ = ["PgLease"]

_RELEASE = f"""SELECT CASE WHEN {OURS} THEN pg_advisory_unlock(%(key)s) END, pg_backend_pid()"""
_CHECK = f"SELECT pg_backend_pid(), {OURS}"
#: Ends the backend a transaction pooler left the lock in (only while it holds it).
_FREE_STRANDED = """SELECT pg_terminate_backend(pid) FROM pg_locks
WHERE locktype = 'advisory' AND pid = %(pid)s AND granted AND objsubid = 1
    AND classid = %(high)s::bigint::oid AND objid = %(low)s::bigint::oid"""

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
        session = self._session
        if session is None or inherited(session):
            return False  # the fork rule: the parent's lock, checked by the parent
        with self._turn:
            session = self._session
            if session is None:
                return False
            if self._lost_reason is None:
                try:
                    self._settle(session)
                    pid, ours = execute(
                        session, self._backend.settings, _CHECK, session.identity, doing
                    )
                except OSError as exc:
                    self.lose(str(exc))
                else:
                    if not ours:
                        self._free_stranded(session)
                        self.lose(f"{elsewhere(session, pid)}: {POOLING_ADVICE}")
            return self._lost_reason is None

    def _free_stranded(self, session: Session) -> None:
        """A pooler moved ``session`` to another backend: end the one it left the lock
        in, if it still holds it (nobody else could ever release it)."""
        key = self._backend.key
        params = {"pid": session.server_pid, "high": (key >> 32) & 0xFFFFFFFF}
        params["low"] = key & 0xFFFFFFFF
        with suppress(OSError):  # not permitted, or gone: the refusal says what to change
            execute(
                session, self._backend.settings, _FREE_STRANDED, params,
                "ending the backend a pooler left the lock in", row=False,
            )  # fmt: skip

    def run(
        self,
        statement: Prepared,
        params: dict[str, Any],
        doing: str,
        before_commit: Callable[[tuple[bytes | None, ...]], None] | None = None,
    ) -> tuple[bytes | None, ...]:
        """Run the start of a cycle on the held session, between the monitor's checks:
        in a transaction committed without waiting (see :mod:`._pgcommit`); ``params``
        gains the session's identity (its backend pid and its mark: :data:`OURS`), for
        the statement to run only there. ``before_commit`` is called with the row
        before the commit is sent; if it raises, nothing is committed (the session,
        and the lock, are dropped).

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
                    session, settings, statement, {**params, **session.identity}, doing
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
                if before_commit is not None:
                    before_commit(row)
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
            monitor().watch(self, fd)

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
        if inherited(session):  # the fork rule: the parent's lock, released by the parent
            self._session = None
            abandon(session)
            return
        pool = self._backend.pool
        try:
            monitor().unwatch(self)
            with self._turn:
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
        params = {**session.identity, "key": self._backend.key}
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
            self._free_stranded(session)
            raise pooling_error(f"releasing the lock: {elsewhere(session, pid)}")
        if released is not True:
            raise OSError(errno.ENOLCK, "the cycle lock was not held by its session at release")

    def __del__(self) -> None:
        session = getattr(self, "_session", None)
        if session is not None:
            self._session = None
            with suppress(Exception):
                self._backend.pool.discard(session)  # closing releases the lock


def _after_fork() -> None:
    global _EVENT_LOCK
    _EVENT_LOCK = threading.Lock()


_pgprocess.after_fork(_after_fork)
