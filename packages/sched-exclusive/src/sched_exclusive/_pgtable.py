"""The ``sched_exclusive`` table: its shape, its creation, and what a process knows of it.

* :func:`init_table` creates it if it does not exist, adds the ``token``
  column to one made by an earlier version, and checks that what is there
  fits (``python -m sched_exclusive init-postgres`` and a holder's first
  use run it).
* :func:`check` names every way an existing table does not fit; a statement
  that fails on the table (or reads a NULL) is :func:`explained` by it.
* :func:`facts` is what this process learned of the table, per pool: whether
  it has the ``token`` column (a table made by an earlier version, which this
  role may not extend, keeps working without tokens), where it is, and which
  database it is in (for ``fence()``).
"""

from __future__ import annotations

import errno
import logging
import threading
import typing
from typing import Any

from psycopg import errors as pg_errors
from psycopg import sql

from ._advisory import advisory_key
from ._pgpool import Pool
from ._pgsession import execute, under_deadline

__all__ = [
    "COLUMNS",
    "TABLE",
    "Facts",
    "add_token_column",
    "check",
    "explained",
    "facts",
    "init_table",
    "learn_where",
]

#: The table holding one row per job name.
TABLE = "sched_exclusive"
#: Each column the library uses: its type (as ``format_type`` spells it) and
#: whether it must be NOT NULL.
COLUMNS = {
    "name": ("text", True),
    "queued": ("bigint", True),
    "holder_since": ("timestamp with time zone", False),
    "holder_host": ("text", False),
    "holder_pid": ("bigint", False),
    "token": ("bigint", True),
}
#: The advisory key that serializes concurrent table creation.
_SETUP_KEY = advisory_key("sched-exclusive table setup")

_CREATE = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    name text PRIMARY KEY,
    queued bigint NOT NULL DEFAULT 0 CHECK (queued >= 0),
    holder_since timestamptz,
    holder_host text,
    holder_pid bigint,
    token bigint NOT NULL DEFAULT 0 CHECK (token >= 0)
)"""
# A constant default: PostgreSQL adds the column without rewriting the table.
_ADD_TOKEN = (
    f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS token bigint NOT NULL DEFAULT 0 "
    "CHECK (token >= 0)"
)
_COMMENT = (
    f"COMMENT ON TABLE {TABLE} IS 'sched-exclusive: queued rerun requests, the last "
    "fencing token and the last holder of each job name "
    "(python -m sched_exclusive status --postgres CONNINFO NAME)'"
)
_WHERE = """SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass(%(table)s)"""
_COLUMNS = """SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
FROM pg_attribute a
WHERE a.attrelid = to_regclass(%(table)s) AND a.attnum > 0 AND NOT a.attisdropped"""
_UNIQUE_NAME = """SELECT EXISTS (
    SELECT FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid
        AND a.attnum = i.indkey[0]
    WHERE i.indrelid = to_regclass(%(table)s) AND i.indisunique AND i.indnatts = 1
        AND i.indpred IS NULL AND a.attname = 'name'
)"""
_IDENTITY = """SELECT (SELECT system_identifier FROM pg_control_system()),
    (SELECT oid FROM pg_database WHERE datname = current_database())"""
_DATABASE = "SELECT NULL::bigint, (SELECT oid FROM pg_database WHERE datname = current_database())"
#: The fence (see :mod:`._postgres`), on the application's connection.
_FENCE = """WITH fence AS MATERIALIZED (
    SELECT token FROM {table} WHERE name = %(name)s FOR KEY SHARE
)
SELECT (SELECT token FROM fence), EXISTS (SELECT FROM fence), {system},
    (SELECT oid FROM pg_database WHERE datname = current_database())"""


@typing.final
class Facts:
    """What this process learned of the table through one pool."""

    __slots__ = ("fence", "identity", "tokens", "where")

    def __init__(self) -> None:
        #: Whether the table has the ``token`` column (``None``: not known yet).
        self.tokens: bool | None = None
        #: The table's schema, once known.
        self.where: str | None = None
        #: ``(system identifier, database oid)``; the system is ``None`` where
        #: ``pg_control_system()`` may not be called.
        self.identity: tuple[int | None, int] | None = None
        #: The fence statement for this table.
        self.fence: sql.Composed | None = None


_FACTS: dict[Pool, Facts] = {}
_FACTS_LOCK = threading.Lock()


def facts(pool: Pool) -> Facts:
    """What this process knows of the table through ``pool``."""
    found = _FACTS.get(pool)
    if found is None:
        with _FACTS_LOCK:
            found = _FACTS.setdefault(pool, Facts())
    return found


def _pooled(pool: Pool, talk: typing.Callable[[Any], Any], doing: str) -> Any:
    """Run ``talk(session)`` on a pooled session, lent back unless it failed."""
    session = pool.take()
    try:
        result = talk(session)
    except BaseException:
        pool.discard(session)
        raise
    pool.give(session)
    return result


def learn_where(pool: Pool) -> Facts:
    """Learn where the table is and which database it is in, once per process (one
    statement, or two where ``pg_control_system()`` may not be called).

    Raises:
        OSError: the table does not exist, or the database could not be read.
    """
    found = facts(pool)

    def talk(session: Any) -> None:
        try:
            (schema,) = execute(session, pool.settings, _WHERE, {"table": TABLE}, "locating")
        except OSError as exc:
            if exc.errno == errno.ENODATA:
                raise OSError(errno.ENOENT, f"the {TABLE} table does not exist") from exc
            raise
        try:
            system, database = execute(session, pool.settings, _IDENTITY, (), "identifying")
        except OSError:
            if session.conn.broken or session.aborted:
                raise
            # pg_control_system() revoked (a managed service): the database alone.
            system, database = execute(session, pool.settings, _DATABASE, (), "identifying")
        found.identity = (None if system is None else int(system), int(database))
        found.fence = sql.SQL(_FENCE).format(
            table=sql.Identifier(schema, TABLE),
            system=sql.SQL(
                "NULL::bigint" if system is None
                else "(SELECT system_identifier FROM pg_control_system())"
            ),
        )  # fmt: skip
        found.where = schema

    _pooled(pool, talk, "locating the table")
    return found


def check(pool: Pool) -> list[str]:
    """Every way the existing table does not fit (empty when it does, or is absent).

    Raises:
        OSError: the catalog could not be read.
    """

    def talk(session: Any) -> list[str]:
        settings = pool.settings
        params = {"table": TABLE}
        columns: dict[str, tuple[str, bool]] = {}
        cursor_rows = under_deadline(
            session,
            settings,
            "checking the table",
            lambda: session.conn.execute(_COLUMNS, params).fetchall(),
        )
        for name, kind, not_null in cursor_rows:
            columns[name] = (kind, bool(not_null))
        if not columns:
            return []
        (unique,) = execute(session, settings, _UNIQUE_NAME, params, "checking the table")
        problems = []
        for name, (kind, not_null) in COLUMNS.items():
            if name not in columns:
                if name != "token":  # an earlier version's table: added on first use
                    problems.append(f"column {name} is missing ({kind} expected)")
                continue
            found_kind, found_not_null = columns[name]
            if found_kind != kind:
                problems.append(f"column {name} is {found_kind}, not {kind}")
            if not_null and not found_not_null and name != "name":
                problems.append(f"column {name} allows NULL (it must be NOT NULL)")
        if not unique:
            problems.append("column name has no primary key or unique index")
        return problems

    result: list[str] = _pooled(pool, talk, "checking the table")
    return result


def explained(pool: Pool, exc: OSError | None) -> OSError:
    """The error to report for ``exc`` (``None``: a NULL read from the row): the
    table's misfits, named, when it has any; else ``exc`` itself."""
    try:
        problems = check(pool)
    except OSError:
        problems = []
    if problems:
        error = OSError(
            errno.EPROTO,
            f"the {TABLE} table does not fit sched-exclusive: {'; '.join(problems)} (fix it, "
            "or drop it and run python -m sched_exclusive init-postgres CONNINFO)",
        )
        if exc is not None:
            error.__cause__ = exc
        return error
    if exc is None:
        return OSError(errno.EPROTO, f"the {TABLE} table holds a NULL count")
    return exc


def add_token_column(pool: Pool, logger: logging.Logger) -> bool:
    """Add the ``token`` column to a table made by an earlier version.

    Returns:
        Whether the table has it now; ``False`` when this role may not alter
        the table (logged once per pool: cycles then run without tokens).

    Raises:
        OSError: the table could not be altered for another reason.
    """

    def talk(session: Any) -> bool:
        conn = session.conn

        def alter() -> None:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SETUP_KEY,))  # see init_table
                conn.execute(_ADD_TOKEN)

        try:
            under_deadline(session, pool.settings, "adding the token column", alter)
        except OSError as exc:
            if isinstance(exc.__cause__, pg_errors.InsufficientPrivilege):
                logger.warning(
                    "the %s table predates fencing tokens and this role may not add their "
                    "column: cycles run without tokens until its owner runs python -m "
                    "sched_exclusive init-postgres CONNINFO (%s)",
                    TABLE,
                    exc.__cause__,
                    extra={"error": str(exc.__cause__)},
                )
                return False
            raise
        return True

    added: bool = _pooled(pool, talk, "adding the token column")
    return added


def init_table(pool: Pool) -> str:
    """Create the table if it does not exist, add the ``token`` column to one made
    by an earlier version, and check what is there (idempotent, safe to race).

    Returns:
        Where the table is: ``schema.table`` as PostgreSQL resolves it.

    Raises:
        OSError: it could not be created or altered (the role may not: run
            ``python -m sched_exclusive init-postgres`` as one that may), or
            an existing table does not fit (``errno.EPROTO``, naming how).
    """
    session = pool.take()
    conn = session.conn

    def create() -> Any:
        with conn.transaction():
            # Two first users at once: CREATE TABLE IF NOT EXISTS alone can
            # still collide on the catalog; the transaction lock serializes.
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SETUP_KEY,))
            conn.execute(_CREATE)
            conn.execute(_ADD_TOKEN)
            conn.execute(_COMMENT)
            return conn.execute(_WHERE, {"table": TABLE}).fetchone()

    try:
        row = under_deadline(session, pool.settings, "creating the table", create)
    except OSError as exc:
        pool.discard(session)
        if isinstance(exc.__cause__, pg_errors.InsufficientPrivilege):
            raise OSError(
                errno.EACCES,
                f"PostgreSQL refused to create or alter the {TABLE} table ({exc.__cause__}); "
                "do it once as a role that may (python -m sched_exclusive init-postgres "
                f"CONNINFO), then grant SELECT, INSERT, UPDATE on {TABLE} to this one",
            ) from exc.__cause__
        raise
    except BaseException:
        pool.discard(session)
        raise
    pool.give(session)
    problems = check(pool)
    if problems:
        raise explained(pool, None)
    facts(pool).tokens = True
    return f"{row[0] if row else 'public'}.{TABLE}"
