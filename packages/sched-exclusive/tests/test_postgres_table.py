"""The sched_exclusive table on a real PostgreSQL server: checked, read with SELECT alone,
extended for tokens, and never made again behind the operator's back.

Each test that shapes the table gets a schema of its own (its sessions' search_path),
so that the suite's shared table is left alone.
"""

from __future__ import annotations

import errno
import logging
import os
import random
import re
import shutil
import string
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sched_exclusive_testkit import (
    DEADLINE,
    PgWorld,
    asking_for_tokens,
    cli,
    close_postgres_sessions,
)

from sched_exclusive import (
    CoordinationError,
    Exclusive,
    Outcome,
    RunError,
    advisory_key,
    fencing_token,
)

psycopg = pytest.importorskip("psycopg")
from psycopg.conninfo import conninfo_to_dict, make_conninfo  # noqa: E402


@pytest.fixture
def schema(postgres_required: str) -> Iterator[str]:
    """A connection string whose sessions see a fresh, empty schema first."""
    name = f"s_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_required, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{name}"')
    try:
        yield make_conninfo(postgres_required, options=f"-c search_path={name}")
    finally:
        close_postgres_sessions()
        with psycopg.connect(postgres_required, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{name}" CASCADE')


@pytest.fixture
def role(postgres_required: str) -> Iterator[str]:
    """A login role with no privileges (dropped afterwards, with what it was granted)."""
    name = f"r_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_required, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{name}" LOGIN')
    try:
        yield name
    finally:
        close_postgres_sessions()
        with psycopg.connect(postgres_required, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (name,),
            )
            admin.execute(f'DROP OWNED BY "{name}"')
            admin.execute(f'DROP ROLE "{name}"')


def sql(dsn: str, statement: str, params: Any = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def hold(dsn: str, name: str) -> Any:
    """Another holder of ``name``'s lock: a connection that keeps it."""
    conn = psycopg.connect(dsn, autocommit=True)
    assert conn.execute("SELECT pg_try_advisory_lock(%s)", (advisory_key(name),)).fetchone()[0]
    return conn


def release(conn: Any, name: str) -> None:
    """Let go of what `hold` took: unlock, then close (a close alone frees the lock only
    once the server has read the goodbye, a moment later, and a call made at once would
    still find it held)."""
    conn.execute("SELECT pg_advisory_unlock(%s)", (advisory_key(name),))
    conn.close()


# --- issue 18 item 8: what does not fit is named; every failure is the package's -------


def test_init_postgres_names_what_does_not_fit(schema: str) -> None:
    """init-postgres over a table of the name that does not fit fails, naming each
    misfit (it used to say "ready")."""
    sql(schema, "CREATE TABLE sched_exclusive (name text, queued integer, holder_since text)")
    result = cli("init-postgres", schema)
    assert 1 == result.returncode, result.stdout
    for problem in (
        "column queued is integer, not bigint",
        "column queued allows NULL",
        "column holder_since is text, not timestamp with time zone",
        "column holder_host is missing",
        "column holder_pid is missing",
        "column name has no primary key or unique index",
    ):
        assert problem in result.stderr, result.stderr


def test_init_postgres_makes_and_checks_the_table(schema: str) -> None:
    """init-postgres makes the table (token column included), and says it is ready twice."""
    for _ in range(2):
        result = cli("init-postgres", schema)
        assert 0 == result.returncode, result.stderr
        assert "sched_exclusive is ready" in result.stdout
    columns = sql(
        schema,
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass('sched_exclusive') "
        "AND attnum > 0 ORDER BY attnum",
    )
    assert ["name", "queued", "holder_since", "holder_host", "holder_pid", "token"] == [
        c for (c,) in columns
    ]


def test_a_null_count_is_a_coordination_error(schema: str) -> None:
    """A nullable queued column holding NULL: a requester gets a CoordinationError that
    names the column (it used to be a bare TypeError), and a holder runs the job and
    reports the same in its RunError."""
    sql(
        schema,
        "CREATE TABLE sched_exclusive (name text PRIMARY KEY, queued bigint, "
        "holder_since timestamptz, holder_host text, holder_pid bigint, "
        "token bigint NOT NULL DEFAULT 0)",
    )
    sql(schema, "INSERT INTO sched_exclusive (name, queued) VALUES ('job', NULL)")
    ex = Exclusive.postgres(schema, "job")
    other = hold(schema, "job")
    try:
        with pytest.raises(CoordinationError) as caught:
            ex.run(lambda: None)
    finally:
        release(other, "job")
    assert errno.EPROTO == caught.value.errno
    assert "column queued allows NULL" in str(caught.value)
    runs: list[None] = []
    with pytest.raises(RunError) as ran:
        ex.run(lambda: runs.append(None))
    assert (Outcome.RAN, [None]) == (ran.value.outcome, runs)
    assert all(isinstance(e, OSError) for e in ran.value.exceptions)
    assert "column queued allows NULL" in str(ran.value.exceptions[0])


def test_limits_are_refused_at_construction() -> None:
    """A name PostgreSQL's btree index cannot hold, a statement_timeout of 2**31 ms or
    more and a name with a lone surrogate are refused when the coordinator is made,
    naming the limit or the culprit (they used to fail on every call)."""
    with pytest.raises(ValueError, match="at most 2600 bytes in UTF-8"):
        Exclusive.postgres("dbname=x", "n" * 2601)
    with pytest.raises(ValueError, match="at most 2600 bytes in UTF-8"):
        Exclusive.postgres("dbname=x", "é" * 1301)
    with pytest.raises(ValueError, match=r"2\*\*31 - 1 milliseconds"):
        Exclusive.postgres("dbname=x", "n", statement_timeout=2**31 / 1000)
    with pytest.raises(ValueError, match=re.escape("lone surrogate ('\\udc80') at index 3")):
        Exclusive.postgres("dbname=x", "abc\udc80")
    Exclusive.postgres("dbname=x", "n" * 2600, statement_timeout=(2**31 - 1) / 1000)


def test_the_longest_name_works(postgres_required: str) -> None:
    """A name at the limit, of characters that do not compress, runs a cycle."""
    rng = random.Random(18)
    name = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(2600))
    world = PgWorld(postgres_required, name)
    try:
        assert Outcome.RAN == world.exclusive().run(lambda: None)
    finally:
        world.conn.execute("DELETE FROM sched_exclusive WHERE name = %s", (name,))
        world.close()
        close_postgres_sessions()


EARLIER_TABLE = """CREATE TABLE sched_exclusive (
    name text PRIMARY KEY,
    queued bigint NOT NULL DEFAULT 0 CHECK (queued >= 0),
    holder_since timestamptz,
    holder_host text,
    holder_pid bigint
)"""


def test_an_earlier_table_gains_the_token_column_on_first_use(schema: str) -> None:
    """A table made by an earlier version (no token column) keeps working, and gains the
    column on first use when the role may alter it."""
    sql(schema, EARLIER_TABLE)
    tokens: list[int] = []
    ex = Exclusive.postgres(schema, "job")
    assert Outcome.RAN == ex.run(lambda: tokens.append(fencing_token()))
    assert Outcome.RAN == ex.run(lambda: tokens.append(fencing_token()))
    assert tokens[0] < tokens[1]
    assert [(tokens[1],)] == sql(schema, "SELECT token FROM sched_exclusive")


def test_an_earlier_table_a_role_may_not_alter_runs_without_tokens(
    schema: str, role: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A role that may not add the column runs the cycles all the same, without tokens
    (a job asking for one is told to run init-postgres), and says so once."""
    caplog.set_level(logging.WARNING, "sched_exclusive")
    sql(schema, EARLIER_TABLE)
    search = str(conninfo_to_dict(schema)["options"]).split("=")[-1]
    sql(schema, f'GRANT USAGE ON SCHEMA "{search}" TO "{role}"')
    sql(schema, f'GRANT SELECT, INSERT, UPDATE ON sched_exclusive TO "{role}"')
    ex = Exclusive.postgres(make_conninfo(schema, user=role), "job")
    job, failures = asking_for_tokens()

    assert Outcome.RAN == ex.run(job)
    assert Outcome.RAN == ex.run(job)
    assert 2 == len(failures)
    messages = [r.getMessage() for r in caplog.records]
    assert 1 == len(messages), messages
    assert "predates fencing tokens" in messages[0]
    assert "init-postgres" in messages[0]


# --- issue 18 item 9: reading needs SELECT alone; a standby says so ------------------------


def test_a_select_only_role_reads_pending_and_status(schema: str, role: str) -> None:
    """pending() and status --postgres need only SELECT: a monitoring role with SELECT
    alone reads them (pending() used to insert the row first)."""
    assert "ready" in cli("init-postgres", schema).stdout
    Exclusive.postgres(schema, "job").run(lambda: None)
    search = str(conninfo_to_dict(schema)["options"]).split("=")[-1]
    sql(schema, f'GRANT USAGE ON SCHEMA "{search}" TO "{role}"')
    sql(schema, f'GRANT SELECT ON sched_exclusive TO "{role}"')
    monitor = make_conninfo(schema, user=role)
    assert 0 == Exclusive.postgres(monitor, "job").pending()
    assert 0 == Exclusive.postgres(monitor, "never-used").pending()
    result = cli("status", "--postgres", monitor, "job")
    assert 0 == result.returncode, result.stderr
    assert result.stdout.startswith("job: idle (last cycle started")


def tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (folder / name).exists():
            return str(folder / name)
    return None


@pytest.fixture
def standby(postgres_required: str) -> Iterator[str]:
    """A hot standby of the test server (pg_basebackup), on a socket of its own."""
    given = conninfo_to_dict(postgres_required)
    host = str(given.get("host", ""))
    basebackup, pg_ctl = tool("pg_basebackup"), tool("pg_ctl")
    if not host.startswith("/") or basebackup is None or pg_ctl is None:
        pytest.skip("needs the test server on a local socket, and pg_basebackup")
    owner: list[str] = []
    work = tempfile.mkdtemp(prefix="sched-r3-19-standby-")
    if os.geteuid() == 0:  # the server refuses to run as root
        shutil.chown(work, "postgres")
        owner = ["runuser", "-u", "postgres", "--"]
    data = f"{work}/data"
    user = str(given.get("user", "postgres"))
    port = str(given.get("port", "5432"))
    try:
        subprocess.run(
            [*owner, basebackup, "-h", host, "-p", port, "-U", user, "-D", data, "-R",
             "-X", "stream", "--no-sync"],
            check=True, capture_output=True, timeout=DEADLINE,
        )  # fmt: skip
        # A standby needs these at least as high as its primary's.
        (settings,) = sql(
            postgres_required,
            "SELECT string_agg(format('-c %%s=%%s', name, setting), ' ') FROM pg_settings "
            "WHERE name IN ('max_connections', 'max_worker_processes', 'max_wal_senders', "
            "'max_prepared_transactions', 'max_locks_per_transaction')",
        )
        options = f"-c listen_addresses='' -k {work} -p {port} -c hot_standby=on {settings[0]}"
        subprocess.run(
            [*owner, pg_ctl, "-D", data, "-l", f"{work}/log", "-o", options, "-w", "start"],
            check=True, capture_output=True, timeout=DEADLINE,
        )  # fmt: skip
        try:
            yield make_conninfo(postgres_required, host=work)
        finally:
            close_postgres_sessions()
            subprocess.run(
                [*owner, pg_ctl, "-D", data, "-m", "immediate", "stop"],
                capture_output=True, timeout=DEADLINE, check=False,
            )  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_status_on_a_hot_standby_says_so(postgres_required: str, standby: str) -> None:
    """status --postgres pointed at a hot standby, while a cycle runs on the primary,
    says it is a standby where running cycles cannot be seen (it used to say idle)."""
    world = PgWorld(postgres_required)
    try:
        world.hold()  # a cycle running on the primary
        result = cli("status", "--postgres", standby, world.name)
    finally:
        world.close()
    assert 0 == result.returncode, result.stderr
    assert result.stdout.startswith(f"{world.name}: unknown"), result.stdout
    assert "hot standby" in result.stderr
    assert "cannot be seen here" in result.stderr


# --- issue 18 item 10: a row or table gone mid-run is said, never silently made again ----


def test_a_row_deleted_mid_run_is_reported(
    postgres_required: str, caplog: pytest.LogCaptureFixture
) -> None:
    """DELETE of the name's row while its holder runs: the holder ends with a warning
    that the requests recorded in it are lost (it used to end with a plain ran)."""
    caplog.set_level(logging.WARNING, "sched_exclusive")
    world = PgWorld(postgres_required)
    try:
        ex = world.exclusive()

        def job() -> None:
            assert Outcome.QUEUED == world.exclusive().run(lambda: None)
            world.conn.execute("DELETE FROM sched_exclusive WHERE name = %s", (world.name,))

        assert Outcome.RAN == ex.run(job)
    finally:
        world.close()
        close_postgres_sessions()
    messages = [r.getMessage() for r in caplog.records]
    assert 1 == len(messages), messages
    assert f"the row of job {world.name!r} vanished while it was in use" in messages[0]


def test_a_table_dropped_mid_run_is_reported_and_not_made_again(
    schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """DROP TABLE while a holder runs: the holder reports it (a warning, and its
    RunError), and the table is not made again behind the operator's back (it used to
    be, without its grants)."""
    caplog.set_level(logging.WARNING, "sched_exclusive")
    ex = Exclusive.postgres(schema, "job")

    def job() -> None:
        sql(schema, "DROP TABLE sched_exclusive")

    with pytest.raises(RunError) as caught:
        ex.run(job)
    assert Outcome.RAN == caught.value.outcome
    assert [errno.ENOENT] == [getattr(e, "errno", None) for e in caught.value.exceptions]
    assert "not made again" in str(caught.value.exceptions[0])
    assert [] == sql(
        schema,
        "SELECT to_regclass('sched_exclusive') WHERE to_regclass('sched_exclusive') IS NOT NULL",
    )
    messages = [r.getMessage() for r in caplog.records]
    assert any("sched_exclusive table of job 'job' vanished" in m for m in messages), messages
    # A requester does not make it either, while the next holder's first cycle does.
    assert Outcome.RAN == Exclusive.postgres(schema, "job").run(lambda: None)
