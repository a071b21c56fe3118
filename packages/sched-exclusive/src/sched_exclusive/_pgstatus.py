"""What ``status --postgres`` reads: one job name's state, without taking its lock."""

from __future__ import annotations

import typing
from datetime import datetime

from psycopg import errors as pg_errors

from . import _pgpool
from ._advisory import advisory_key
from ._pgsession import execute
from ._postgres import TABLE
from ._status import render_json, render_line

__all__ = ["PostgresStatus", "read_status"]

_STATUS = f"""SELECT q.queued, q.holder_since, q.holder_host, q.holder_pid, now()
FROM (SELECT 1) AS one LEFT JOIN {TABLE} AS q ON q.name = %s"""
_LOCK_HOLDER = """SELECT pid FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND classid = %(high)s::bigint::oid AND objid = %(low)s::bigint::oid
LIMIT 1"""


@typing.final
class PostgresStatus(typing.NamedTuple):
    """A snapshot of one job name in PostgreSQL."""

    name: str
    #: ``"running"``, ``"idle"``, or ``"unknown"`` on a hot standby.
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

    def as_json(self) -> dict[str, object]:
        """The snapshot as JSON-ready values, in the shape of a directory's."""
        holder: dict[str, object] = {
            "host": self.host,
            "pid": self.pid,
            "backend_pid": self.backend_pid,
        }
        return render_json(self, {"name": self.name}, holder)

    def describe(self) -> str:
        """One line for a human, as a directory's reads."""
        return render_line(
            self, self.name, "" if self.host is None else f"host {self.host}, pid {self.pid}"
        )


def read_status(
    conninfo: str, name: str, *, connect_timeout: float = 10, statement_timeout: float = 5
) -> PostgresStatus:
    """Read ``name``'s state without taking its lock (``pg_locks`` and its row).

    Raises:
        OSError: the database could not be reached or read.
    """
    pool = _pgpool.pool(conninfo, connect_timeout, statement_timeout)
    key = advisory_key(name)
    session = pool.take()
    try:
        holder = execute(
            session,
            pool.settings,
            f"SELECT ({_LOCK_HOLDER}), now(), pg_is_in_recovery()",
            {"high": (key >> 32) & 0xFFFFFFFF, "low": key & 0xFFFFFFFF},
            "reading pg_locks",
        )
        notes: tuple[str, ...] = ()
        try:
            queued, since, host, pid, _ = execute(
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
    backend_pid, now, standby = holder
    running = backend_pid is not None
    running_for = None
    if running and since is not None:
        running_for = max(int((now - since).total_seconds()), 0)
    if standby:  # advisory locks are not replicated: a standby never sees one held
        notes += (
            "this server is a hot standby (in recovery): advisory locks are not replicated, "
            "so a cycle running on the primary cannot be seen here; ask the primary",
        )
    return PostgresStatus(
        name,
        "unknown" if standby else "running" if running else "idle",
        since,
        running_for,
        host,
        None if pid is None else int(pid),
        backend_pid,
        0 if queued is None else int(queued),
        notes,
    )
