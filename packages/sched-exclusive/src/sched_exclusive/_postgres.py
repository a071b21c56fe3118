"""The PostgreSQL backend: a session advisory lock and a counter row.

Imported only by :meth:`Exclusive.postgres` (it imports psycopg). The seam's
duties, met here with the SQL that serves them:

* **The lock** is ``pg_try_advisory_lock(advisory_key(name))`` taken on a
  connection of its own (a *session*, :mod:`._pgsession`), held for the
  whole stretch and released with ``pg_advisory_unlock`` on that same
  session (:mod:`._pglease`); PostgreSQL releases it when the session ends,
  whatever ended it. Advisory locks are re-entrant within a session, so no
  two holders ever share one: a session is lent to one user at a time by
  the process-wide pool (:mod:`._pgpool`).
* **The counter** is the ``queued`` column of ``name``'s row in the
  ``sched_exclusive`` table; each change is one statement that locks the row,
  returns the value before and writes only a change. No transaction is ever
  left open.

The acquire runs only in the session's own backend (``CASE WHEN
pg_backend_pid() = …``) and only in a backend that does not hold the lock
already (a re-entrant win, another client's, behind a transaction pooler);
either is refused with an error saying what to change.
"""

from __future__ import annotations

import errno
import logging
import socket
import typing
from typing import Any

from psycopg import errors as pg_errors

from . import _pgpool, _pgsession
from ._advisory import advisory_key
from ._backend import Change
from ._pglease import PgLease
from ._pgpool import Pool
from ._pgsession import Session, execute, pooling_error, under_deadline

__all__ = ["TABLE", "PostgresBackend", "init_table"]

#: The table holding one row per job name.
TABLE = "sched_exclusive"
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
        self, session: Session, query: str, params: Any, doing: str
    ) -> tuple[Any, ...] | None:
        """One statement about the name's row, on ``session``; ``None`` when the row is
        missing. The table is created on first use, and the row of the name too."""
        for attempt in (1, 2):
            try:
                if not self._row_ready:
                    execute(
                        session, self.settings, _ENSURE_ROW, (self.name,), "preparing the row",
                        row=False,
                    )  # fmt: skip
                    self._row_ready = True
                return execute(session, self.settings, query, params, doing)
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
            params = {
                **self._acquire_params,
                "pid": session.server_pid,
                "client_pid": _pgsession.pid(),
            }
            row = self._statement(session, _ACQUIRE, params, "taking the lock")
            won, pid, held_here = row or (None, None, None)
            if won is None:
                raise pooling_error(
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


def init_table(pool: Pool) -> str:
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
        row = under_deadline(session, pool.settings, "creating the table", create)
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
