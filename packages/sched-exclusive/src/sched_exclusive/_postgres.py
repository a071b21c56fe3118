"""The PostgreSQL backend: a session advisory lock, a counter row and its token.

Imported only by :meth:`Exclusive.postgres` (it imports psycopg). The seam's
duties, met here with the SQL that serves them (the table's own shape,
creation and checks are in :mod:`._pgtable`):

* **The lock** is ``pg_try_advisory_lock(advisory_key(name))`` taken on a
  connection of its own (a *session*, :mod:`._pgsession`), held for the
  whole stretch and released with ``pg_advisory_unlock`` on that same
  session (:mod:`._pglease`); PostgreSQL releases it when the session ends,
  whatever ended it. Advisory locks are re-entrant within a session, so no
  two holders ever share one: a session is lent to one user at a time by
  the process-wide pool (:mod:`._pgpool`). The acquire runs only in the
  session's own backend (``CASE WHEN pg_backend_pid() = …``) and only in a
  backend that does not hold the lock already (a re-entrant win, another
  client's, behind a transaction pooler); either is refused with an error
  saying what to change.
* **The counter** is the ``queued`` column of ``name``'s row in the
  ``sched_exclusive`` table. A requester's change is one statement on a
  pooled session that locks the row ``FOR NO KEY UPDATE``, returns the
  value before and writes only a change. No transaction is ever left open.
* **The start of a cycle** is one statement on the held session (so it
  also proves the session): it locks the row ``FOR UPDATE``, settles the
  counter or takes the request the cycle serves, and draws the cycle's
  fencing token into the ``token`` column, ``max(token + 1, the server's
  clock in µs)``; the first start of a holder also records it (host, pid,
  since) for ``status``. A holder dying around it took the request and
  drew the token, or neither.
* **Fencing** (:mod:`._pgfence`): the job's own transaction
  locks the row ``FOR KEY SHARE`` and compares the tokens. ``FOR UPDATE``
  is the only row lock that conflicts with ``FOR KEY SHARE``: the start of
  a later cycle waits for the fenced transaction to end (at most the
  ``statement_timeout``), while the requesters' ``FOR NO KEY UPDATE``
  changes never wait on it.

Only the start of a holder's cycle creates the table, and only a writer
creates a name's row: reads (``pending()``, ``status``) need SELECT alone,
and a table or row that vanishes while its holder runs is reported, never
silently made again.
"""

from __future__ import annotations

import errno
import logging
import socket
import typing
import weakref
from collections.abc import Callable
from contextlib import suppress
from functools import partial
from typing import Any

from psycopg import errors as pg_errors

from . import _pgfence, _pgpool, _pgsession, _pgtable
from ._advisory import advisory_key
from ._backend import Change, Lease, NotStarted, Started
from ._pgcommit import Prepared
from ._pglease import PgLease
from ._pgsession import OURS, Session, elsewhere, ended_idle, execute, pooling_error
from ._pgsession import POOLING_ADVICE as ADVICE
from ._pgtable import TABLE, init_table

__all__ = ["TABLE", "PostgresBackend", "init_table"]

#: ``won`` is NULL when the statement ran in another backend than the
#: session's, or in one that holds the lock already (re-entrant: another
#: client's, behind a transaction pooler); ``held_here`` tells which.
_ACQUIRE = f"""WITH here AS (
    SELECT {OURS} AS ours, EXISTS (
        SELECT FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
            AND granted AND objsubid = 1
            AND classid = %(high)s::bigint::oid AND objid = %(low)s::bigint::oid
    ) AS held_here
)
SELECT CASE WHEN ours AND NOT held_here THEN pg_try_advisory_lock(%(key)s) END,
    pg_backend_pid(), held_here
FROM here"""
_READ = f"SELECT queued FROM {TABLE} WHERE name = %s"
_READ_PREPARED = Prepared.of(
    "sched_exclusive_read", f"SELECT queued FROM {TABLE} WHERE name = %(name)s"
)
_INSERT_ROW = f"INSERT INTO {TABLE} (name) VALUES (%(name)s) ON CONFLICT (name) DO NOTHING"
_AFTER = {
    "enqueue": "CASE WHEN queued < %(capacity)s THEN queued + 1 ELSE queued END",
    "take": "CASE WHEN queued > 0 THEN queued - 1 ELSE queued END",
    "clear": "0",
}
#: A requester's change: lock the row (``FOR NO KEY UPDATE``: never waiting on a
#: fenced transaction), return the count before, write only a change.
_CHANGES = {
    kind: f"""WITH old AS (
    SELECT queued FROM {TABLE} WHERE name = %(name)s FOR NO KEY UPDATE
), new AS (
    SELECT queued AS before, {after} AS after FROM old
), written AS (
    UPDATE {TABLE} SET queued = new.after FROM new
    WHERE {TABLE}.name = %(name)s AND new.after <> new.before
)
SELECT before FROM new"""
    for kind, after in _AFTER.items()
}
_CLOCK_US = "floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"


def _start_sql(kind: str, *, always: bool, tokens: bool) -> str:
    """The statement starting a cycle that settles (``clear``) or takes (``take``).

    It runs only in the held session's backend, waits for fenced transactions
    (``FOR UPDATE``), and returns the count before, the token drawn (NULL when
    no cycle starts: a take that found nothing), whether it ran in the held
    session's backend, and whether the row was there. Without ``tokens`` (a table made by an earlier
    version that this role may not extend) it draws none.
    """
    runs = "true" if always or kind == "clear" else "queued > 0"
    draw = f"GREATEST(new.token + 1, {_CLOCK_US})" if tokens else "NULL::bigint"
    return f"""WITH old AS (
    SELECT queued{", token" if tokens else ""} FROM {TABLE}
    WHERE name = %(name)s AND {OURS} FOR UPDATE
), new AS (
    SELECT true AS present, queued AS before, {_AFTER[kind]} AS after, {runs} AS runs{
        ", token" if tokens else ""
    } FROM old
), written AS (
    UPDATE {TABLE} AS t SET queued = new.after{
        f", token = CASE WHEN new.runs THEN {draw} ELSE t.token END" if tokens else ""
    },
        holder_since = CASE WHEN %(fresh)s THEN now() ELSE t.holder_since END,
        holder_host = CASE WHEN %(fresh)s THEN %(host)s ELSE t.holder_host END,
        holder_pid = CASE WHEN %(fresh)s THEN %(client_pid)s ELSE t.holder_pid END
    FROM new WHERE t.name = %(name)s AND (new.runs OR new.after <> new.before OR %(fresh)s)
    RETURNING CASE WHEN new.runs THEN {"t.token" if tokens else "NULL::bigint"} END AS drawn
)
SELECT new.before, (SELECT drawn FROM written), {OURS},
    new.present IS NOT NULL
FROM (SELECT 1) AS one LEFT JOIN new ON true"""


_STARTS = {
    (kind, always, tokens): Prepared.of(
        f"sched_exclusive_start_{kind}{'_always' if always else ''}"
        f"{'' if tokens else '_tokenless'}",
        _start_sql(kind, always=always, tokens=tokens),
    )
    for kind in ("clear", "take")
    for always in (True, False)
    for tokens in (True, False)
}


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
        self.pool = _pgpool.pool(conninfo, connect_timeout, statement_timeout)
        self.settings = self.pool.settings
        self._logger = logger
        self._wrote = False  # this coordinator has written the name's row (it exists)
        self._started: weakref.WeakSet[PgLease] = weakref.WeakSet()  # leases past their 1st start
        self._acquire_params = {
            "key": self.key,
            "high": (self.key >> 32) & 0xFFFFFFFF,
            "low": self.key & 0xFFFFFFFF,
        }

    def report_loss(self, reason: str) -> None:
        """Log that a held session was lost (from whichever thread noticed)."""
        if self._logger.isEnabledFor(logging.WARNING):
            self._logger.warning(
                "cycle lock session lost; the running job is no longer guarded (%s)",
                reason,
                extra={"job": self.name, "error": reason},
            )

    def _vanished(self, what: str) -> None:
        """Say, once, that the row this coordinator wrote is gone."""
        if self._wrote:
            self._wrote = False
            self._logger.warning(
                "the %s of job %r vanished while it was in use (deleted by someone): the "
                "requests it recorded are lost; it is not made again behind the operator's back",
                what,
                self.name,
                extra={"job": self.name, "sched_vanished": what},
            )

    def _pooled(self, query: str, params: Any, doing: str) -> tuple[Any, ...]:
        """One statement on a pooled session (never a held one: that one serves only
        its lease's statements, whichever thread, task or forked child asks); a session
        the server ended while it was idle is replaced, the statement never having run."""
        while True:
            session = self.pool.take()
            try:
                row = execute(session, self.settings, query, params, doing)
            except OSError as exc:
                if exc.errno == errno.ENODATA:
                    self.pool.give(session)  # no row: an answer, not a failure of the session
                    raise
                self.pool.discard(session)
                if ended_idle(session, exc):
                    continue  # ended while idle: the statement did not run
                raise
            except BaseException:
                self.pool.discard(session)
                raise
            self.pool.give(session)
            return row

    def try_acquire(self) -> PgLease | None:
        while True:
            session = self.pool.take()
            lease = PgLease(self, session)  # owns the session before the lock statement runs
            try:
                # Stored, not returned, inside the block: a return is outside the
                # handlers, and an interrupt there would keep the won lease alive
                # in this frame (its traceback's) with the lock.
                held = self._acquire(lease, session)
            except OSError as exc:
                lease.close()  # the lock may have been taken: closing releases it
                if not ended_idle(session, exc):
                    raise
            except BaseException:
                lease.close()
                raise
            else:
                return held

    def _acquire(self, lease: PgLease, session: Session) -> PgLease | None:
        params = {**self._acquire_params, **session.identity}
        won, pid, held_here = execute(session, self.settings, _ACQUIRE, params, "taking the lock")
        if won is None:
            raise pooling_error(
                f"the lock is already held by PostgreSQL backend {pid}, which answered "
                f"this session's statement: another client's session, through the same "
                f"server connection"
                if held_here
                else elsewhere(session, pid)
            )
        if won:
            lease.hold()
            return lease
        lease.give_back()
        return None

    def read_counter(self, lease: Lease | None = None) -> int:
        """Read the counter with a SELECT alone (a missing table or row reads as zero):
        through a held lease's session, right behind its cycle's commit, or on a pooled
        session."""
        try:
            if isinstance(lease, PgLease):
                found = lease.look(_READ_PREPARED, {"name": self.name}, "reading the counter")
                if not found:
                    raise OSError(errno.ENODATA, "PostgreSQL returned no row")
                (queued,) = found
            else:
                (queued,) = self._pooled(_READ, (self.name,), "reading the counter")
        except OSError as exc:
            if lease is not None and exc.errno == errno.ENOLCK:
                raise NotStarted(exc.errno, exc.strerror) from exc
            if exc.errno == errno.ENODATA:
                self._vanished("row")
                return 0
            if isinstance(exc.__cause__, pg_errors.UndefinedTable):
                if self._wrote:
                    self._vanished(f"{TABLE} table")
                    raise _table_vanished() from exc.__cause__
                return 0
            raise _pgtable.explained(self.pool, exc) from exc
        if queued is None:
            raise _pgtable.explained(self.pool, None)
        return max(int(queued), 0)

    def update_counter(self, fn: Change) -> int:
        """A requester's change; the name's row is made if missing, the table never."""
        params = {"name": self.name, "capacity": fn.capacity}
        for attempt in (1, 2):
            try:
                (before,) = self._pooled(_CHANGES[fn.kind], params, "changing the counter")
            except OSError as exc:
                if exc.errno == errno.ENODATA and attempt == 1:
                    self._vanished("row")
                    self._pooled_insert()
                    continue
                if isinstance(exc.__cause__, pg_errors.UndefinedTable):
                    self._vanished(f"{TABLE} table")
                    raise _table_vanished() from exc.__cause__
                raise _pgtable.explained(self.pool, exc) from exc
            if before is None:
                raise _pgtable.explained(self.pool, None)
            self._wrote = True
            return max(int(before), 0)
        raise OSError(errno.ENODATA, f"the counter row of {self.name!r} is missing")

    def _pooled_insert(self) -> None:
        session = self.pool.take()
        try:
            execute(session, self.settings, _INSERT_ROW, {"name": self.name}, "making the row",
                    row=False)  # fmt: skip
        except BaseException:
            self.pool.discard(session)
            raise
        self.pool.give(session)

    def start(
        self,
        lease: Lease,
        change: Change,
        *,
        always: bool = False,
        seen: Callable[[int], None] | None = None,
    ) -> Started:
        """The start of a cycle, in one statement on the held session (see the module)."""
        if not isinstance(lease, PgLease):  # pragma: no cover - the rules pass our own
            raise TypeError(f"not a lease of this backend: {lease!r}")
        fresh = lease not in self._started
        params = {"name": self.name, "fresh": fresh, "host": _HOST, "client_pid": _pgsession.pid()}
        facts = _pgtable.facts(self.pool)
        if facts.where is None:
            # For fence(), once per process (until the table exists); before the start,
            # never between its commit and the job, the window item 11 narrows.
            with suppress(OSError):
                _pgtable.learn_where(self.pool)
        table_made = row_made = False
        while True:
            try:
                row = lease.run(
                    _STARTS[change.kind, always, facts.tokens is not False],
                    params,
                    "starting a cycle",
                    None if seen is None else partial(_seen, seen),
                )
            except OSError as exc:
                cause = exc.__cause__
                if exc.errno == errno.ENOLCK:
                    raise NotStarted(exc.errno, exc.strerror) from exc
                if isinstance(cause, pg_errors.QueryCanceled):
                    raise NotStarted(errno.ETIMEDOUT, self._waited(exc)) from exc
                if isinstance(cause, pg_errors.UndefinedTable) and fresh and not table_made:
                    init_table(self.pool)  # first use: the start of a holder makes it
                    table_made = True
                    continue
                if isinstance(cause, pg_errors.UndefinedTable):
                    self._vanished(f"{TABLE} table")
                    raise NotStarted(errno.ENOENT, str(_table_vanished())) from cause
                if isinstance(cause, pg_errors.UndefinedColumn) and facts.tokens is None:
                    facts.tokens = _pgtable.add_token_column(self.pool, self._logger)
                    continue
                return 0, _no_token(exc), _pgtable.explained(self.pool, exc)
            before, token, ours, present = row
            if ours != b"t":
                lease.lose(f"the start of a cycle ran in another PostgreSQL backend: {ADVICE}")
                lease.locked  # noqa: B018 - marks the loss reported: one error, not two
                raise NotStarted(errno.ENOLCK, f"the cycle lock was lost: {ADVICE}")
            if present == b"t":
                break
            self._vanished("row")
            if not fresh or row_made:  # gone mid-call: no demand left to serve
                return 0, _no_token(None), None
            self._pooled_insert()  # first use of the name
            row_made = True
        self._started.add(lease)
        self._wrote = True
        if facts.tokens is None:
            facts.tokens = True
        if before is None:
            return 0, _no_token(None), _pgtable.explained(self.pool, None)
        return max(int(before), 0), (_no_token(None) if token is None else int(token)), None

    def _waited(self, exc: OSError) -> str:
        return (
            f"the next cycle of {self.name!r} did not start: its row stayed locked for the "
            f"statement_timeout of {self.settings.statement_timeout:g} s, most likely by a "
            "fenced transaction of an earlier cycle that is still open (fence(conn) holds "
            f"the row until that transaction ends); the queued demand stays recorded ({exc})"
        )

    def fence(self, conn: Any, token: int | OSError) -> int:
        """:func:`sched_exclusive.fence` for a job of this coordinator."""
        return _pgfence.fence(self.name, self.pool, conn, token)

    async def afence(self, aconn: Any, token: int | OSError) -> int:
        """:func:`sched_exclusive.afence` for a job of this coordinator."""
        return await _pgfence.afence(self.name, self.pool, aconn, token)


def _seen(seen: Callable[[int], None], row: tuple[bytes | None, ...]) -> None:
    """Pass what the start found to ``seen``, before it commits: only a count
    read on our own session from a row that is there."""
    before, _, ours, present = row
    if before is not None and ours == b"t" and present == b"t":
        seen(max(int(before), 0))


def _no_token(exc: OSError | None) -> OSError:
    if exc is None:
        return OSError(errno.ENODATA, "this cycle drew no fencing token")
    return OSError(exc.errno, f"this cycle has no fencing token: {exc}")


def _table_vanished() -> OSError:
    return OSError(
        errno.ENOENT,
        f"the {TABLE} table vanished while in use (dropped by someone): it is not made again "
        "mid-run, since a table made again loses its grants; run python -m sched_exclusive "
        "init-postgres CONNINFO as its owner, and grant it again",
    )


_HOST = socket.gethostname()
