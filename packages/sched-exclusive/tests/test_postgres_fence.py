"""fence() and afence(): a job's own transaction on the coordinating database, fenced by
its cycle, against a real PostgreSQL server and real processes.

Holder A's lock session is ended under its running job (``pg_terminate_backend``,
as a partition or a failover would end it from the holder's point of view), and
holder B runs the next cycle: A's fenced transaction either is refused
(``FencedOut``) or, fenced first, commits before B's cycle starts.
"""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sched_exclusive_testkit import DEADLINE, PgWorld, close_postgres_sessions
from sched_testing import Child

from sched_exclusive import (
    CoordinationError,
    FencedOut,
    Outcome,
    RunError,
    advisory_key,
    afence,
    fence,
    fencing_token,
    lock_lost,
)

psycopg = pytest.importorskip("psycopg")
from psycopg.conninfo import make_conninfo  # noqa: E402


@pytest.fixture
def pg(postgres_required: str) -> Iterator[PgWorld]:
    """A fresh job name, and a table ``w_<name>`` the jobs write to."""
    world = PgWorld(postgres_required)
    world.conn.execute(f'CREATE TABLE "w_{world.name}" (who text, token bigint, at timestamptz)')
    try:
        yield world
    finally:
        world.conn.execute(f'DROP TABLE IF EXISTS "w_{world.name}"')
        world.close()
        close_postgres_sessions()


def written(world: PgWorld) -> list[tuple[str, int, Any]]:
    """What the jobs wrote, in the order of their clocks."""
    rows = world.conn.execute(f'SELECT who, token, at FROM "w_{world.name}" ORDER BY at').fetchall()
    return [tuple(row) for row in rows]


def write(conn: Any, world: PgWorld, who: str, token: int) -> None:
    conn.execute(f'INSERT INTO "w_{world.name}" VALUES (%s, %s, clock_timestamp())', (who, token))


def lock_backend(world: PgWorld) -> int:
    """The server pid of the session holding ``world``'s advisory lock."""
    key = advisory_key(world.name)
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        row = world.conn.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
            "AND classid = %s::bigint::oid AND objid = %s::bigint::oid",
            ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF),
        ).fetchone()
        if row is not None:
            return int(row[0])
    raise AssertionError("nobody holds the lock")


def end_the_lock_session(world: PgWorld) -> None:
    """End the holder's lock session, as a partition or a failover would, and wait until
    the server has let the lock go."""
    pid = lock_backend(world)
    world.conn.execute("SELECT pg_terminate_backend(%s, %s)", (pid, int(DEADLINE * 1000)))
    assert world.lock_is_free() or world.frees_everything()


def start_waits(world: PgWorld) -> bool:
    """Whether a session waits for a row lock in the start of a cycle."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        row = world.conn.execute(  # the statement that starts a cycle records its holder
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE '%holder_since = CASE%'"
        ).fetchone()
        if row and row[0]:
            return True
    return False


# Holder A: its job says its token, then obeys lines on stdin on its own connection to
# the database ("fence", "write", "commit", "rollback", "end") and says how each went.
HOLDER = """
import os, sys
import psycopg
from sched_exclusive import Exclusive, FencedOut, fence, fencing_token, lock_lost
dsn, name = os.environ["SCHED_TEST_POSTGRES"], sys.argv[1]
def job():
    token = fencing_token()
    print("token", token, flush=True)
    app = psycopg.connect(dsn)
    for line in sys.stdin:
        command = line.split()
        if command[0] == "fence":
            try:
                print("fenced", fence(app), flush=True)
            except FencedOut as exc:
                app.rollback()
                print("fencedout", exc.token, exc.newer, flush=True)
        elif command[0] == "write":
            app.execute(
                f'INSERT INTO "w_{name}" VALUES (%s, %s, clock_timestamp())', ("A", token)
            )
            print("written", flush=True)
        elif command[0] == "commit":
            app.commit()
            print("committed", flush=True)
        elif command[0] == "lost":
            print("lost", lock_lost().wait(30), flush=True)
        elif command[0] == "end":
            break
    app.close()
try:
    print("outcome", Exclusive.postgres(dsn, name).run(job), flush=True)
except Exception as exc:
    print("failed", type(exc).__name__, flush=True)
"""


def holder(world: PgWorld, children: list[Child]) -> tuple[Child, int]:
    child = Child(HOLDER, world.name)
    children.append(child)
    kind, token = child.read_line().split()
    assert "token" == kind
    return child, int(token)


def ask(child: Child, command: str) -> str:
    child.write_line(command)
    return child.read_line()


def b_cycle(world: PgWorld, **kwargs: Any) -> tuple[Outcome, list[int]]:
    """Holder B's cycle: it writes its token with its clock, on its own connection."""
    tokens: list[int] = []

    def job() -> None:
        token = fencing_token()
        tokens.append(token)
        with psycopg.connect(world.dsn) as app:
            write(app, world, "B", token)

    return world.exclusive(**kwargs).run(job), tokens


def test_a_stale_holder_is_fenced_out(pg: PgWorld, children: list[Child]) -> None:
    """A's lock session ends under its job; B runs the next cycle and writes; then A
    writes and fences on its own connection: FencedOut names both tokens, A rolls
    back, and A's write is absent."""
    a, a_token = holder(pg, children)
    end_the_lock_session(pg)
    assert "lost True" == ask(a, "lost")
    outcome, (b_token,) = b_cycle(pg)
    assert Outcome.RAN == outcome
    assert b_token > a_token
    assert "written" == ask(a, "write")
    assert f"fencedout {a_token} {b_token}" == ask(a, "fence")
    assert "committed" == ask(a, "commit")  # commits nothing: rolled back
    assert "failed RunError" == ask(a, "end")  # the call reports the lost lock
    assert [("B", b_token)] == [(who, token) for who, token, _ in written(pg)]


def test_a_fenced_transaction_commits_before_the_next_cycle_starts(
    pg: PgWorld, children: list[Child]
) -> None:
    """A fences first and keeps its transaction open; A's lock is lost; B's next cycle
    waits for A's transaction; A's write commits, and B's cycle starts after it (by
    the server's clock_timestamp() recorded in both)."""
    a, a_token = holder(pg, children)
    assert f"fenced {a_token}" == ask(a, "fence")
    end_the_lock_session(pg)
    assert "lost True" == ask(a, "lost")
    b: list[tuple[Outcome, list[int]]] = []
    thread = threading.Thread(target=lambda: b.append(b_cycle(pg, statement_timeout=DEADLINE)))
    thread.start()
    try:
        assert start_waits(pg), "B's cycle did not wait for A's fenced transaction"
        assert [] == b
        assert "written" == ask(a, "write")
        assert "committed" == ask(a, "commit")
    finally:
        thread.join(DEADLINE)
    ((outcome, (b_token,)),) = b
    assert Outcome.RAN == outcome
    assert b_token > a_token
    (who_a, token_a, at_a), (who_b, token_b, at_b) = written(pg)
    assert ("A", a_token, "B", b_token) == (who_a, token_a, who_b, token_b)
    assert at_a < at_b
    ask(a, "end")


def test_a_fenced_transaction_left_open_stops_the_next_cycle(pg: PgWorld) -> None:
    """A later cycle waits for an open fenced transaction of an earlier one at most its
    statement_timeout, then fails with a CoordinationError that says why; nothing ran,
    and once the transaction ends the next call runs."""
    stuck: list[Any] = []

    def job() -> None:
        app = psycopg.connect(pg.dsn)
        fence(app)
        stuck.append(app)
        end_the_lock_session(pg)
        assert lock_lost().wait(DEADLINE)

    with pytest.raises(RunError):
        pg.exclusive().run(job)
    runs: list[int] = []
    started = time.monotonic()
    with pytest.raises(CoordinationError) as caught:
        pg.exclusive(statement_timeout=0.5).run(lambda: runs.append(fencing_token()))
    took = time.monotonic() - started
    assert (Outcome.NONE, errno.ETIMEDOUT) == (caught.value.outcome, caught.value.errno)
    assert "fenced transaction of an earlier cycle" in str(caught.value)
    assert [] == runs
    assert took < 0.5 + 1.0 + DEADLINE / 10
    stuck[0].commit()
    stuck[0].close()
    assert Outcome.RAN == pg.exclusive().run(lambda: runs.append(fencing_token()))
    assert 1 == len(runs)


def test_requesters_never_wait_on_a_fenced_transaction(pg: PgWorld) -> None:
    """While the job holds a fenced transaction open, 20 run() requesters each return
    queued or discarded in under 100 ms (a wait would last the 5 s statement_timeout);
    the holder's own fenced write then commits."""
    other = pg.exclusive()
    times: list[float] = []
    outcomes: list[Outcome] = []

    def job() -> None:
        if outcomes:
            return  # the rerun the requesters asked for
        token = fencing_token()
        with psycopg.connect(pg.dsn) as app:
            assert token == fence(app)
            write(app, pg, "A", token)
            for _ in range(20):
                started = time.monotonic()
                outcomes.append(other.run(lambda: None))
                times.append(time.monotonic() - started)
        # committed on leaving the block

    other.pending()  # its pooled session is open before the clock starts
    assert Outcome.RAN_QUEUED == pg.exclusive().run(job)
    assert [Outcome.QUEUED] + [Outcome.DISCARDED] * 19 == outcomes
    assert max(times) < 0.1, [round(t * 1000, 1) for t in times]
    assert ["A"] == [who for who, _, _ in written(pg)]


def test_fence_in_repeatable_read_after_a_later_cycle_started(pg: PgWorld) -> None:
    """A REPEATABLE READ transaction whose snapshot predates the start of a later cycle
    is fenced out too (PostgreSQL refuses its older view of the row), not handed the
    older token."""
    seen: list[FencedOut] = []

    def job() -> None:
        app = psycopg.connect(pg.dsn)
        app.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        app.execute("SELECT 1")  # the snapshot
        end_the_lock_session(pg)
        assert Outcome.RAN == pg.exclusive().run(lambda: None)  # B's cycle
        try:
            fence(app)
        except FencedOut as exc:
            seen.append(exc)
        app.rollback()
        app.close()

    with pytest.raises(RunError):
        pg.exclusive().run(job)
    assert 1 == len(seen)
    assert seen[0].newer is None
    assert "a later cycle has started" in str(seen[0])


def test_fence_refuses_what_it_cannot_fence(pg: PgWorld, postgres_required: str) -> None:
    """An autocommit connection, something that is not a psycopg connection, a
    connection to another database (with or without the table): each is refused with
    an error naming what is wrong, before or instead of fencing."""
    other_db = f"r3fence_{uuid.uuid4().hex[:8]}"
    pg.conn.execute(f'CREATE DATABASE "{other_db}"')
    other_dsn = f"{postgres_required} dbname={other_db}"
    failures: dict[str, BaseException] = {}

    def attempt(key: str, call: Any) -> None:
        try:
            call()
        except (ValueError, TypeError) as exc:
            failures[key] = exc

    def job() -> None:
        with psycopg.connect(pg.dsn, autocommit=True) as auto:
            attempt("autocommit", lambda: fence(auto))
        attempt("type", lambda: fence(pg.dsn))
        with psycopg.connect(other_dsn) as elsewhere:
            attempt("no table", lambda: fence(elsewhere))
        with psycopg.connect(other_dsn, autocommit=True) as admin:
            admin.execute("CREATE TABLE sched_exclusive (name text PRIMARY KEY, token bigint)")
            admin.execute("INSERT INTO sched_exclusive VALUES (%s, 1)", (pg.name,))
        with psycopg.connect(other_dsn) as elsewhere:
            attempt("another database", lambda: fence(elsewhere))

    try:
        assert Outcome.RAN == pg.exclusive().run(job)
    finally:
        close_postgres_sessions()
        pg.conn.execute(f'DROP DATABASE "{other_db}" WITH (FORCE)')
    assert isinstance(failures["autocommit"], ValueError)
    assert "autocommit" in str(failures["autocommit"])
    assert isinstance(failures["type"], TypeError)
    assert isinstance(failures["no table"], ValueError)
    assert "no sched_exclusive table" in str(failures["no table"])
    assert isinstance(failures["another database"], ValueError)
    assert "another database" in str(failures["another database"])


def test_afence_under_arun(pg: PgWorld) -> None:
    """afence() on an AsyncConnection, in a job run by arun: the token, and the write
    commits with it."""
    tokens: list[int] = []

    async def job() -> None:
        async with await psycopg.AsyncConnection.connect(pg.dsn) as app:
            token = await afence(app)
            tokens.append(token)
            await app.execute(
                f'INSERT INTO "w_{pg.name}" VALUES (%s, %s, clock_timestamp())', ("A", token)
            )

    async def main() -> Outcome:
        return await pg.exclusive().arun(job)

    assert Outcome.RAN == asyncio.run(main(), debug=True)
    assert [("A", tokens[0])] == [(who, token) for who, token, _ in written(pg)]


def test_fence_outside_a_job() -> None:
    """Outside a job: RuntimeError, sync and async. (Under a directory: test_tokens.)"""
    with pytest.raises(RuntimeError, match=r"fence\(\) is only available inside a job"):
        fence(object())
    with pytest.raises(RuntimeError, match=r"afence\(\) is only available inside a job"):
        asyncio.run(afence(object()))


#: The docs' example of fenced writes (absent where the suite runs from a wheel).
FENCED = Path(__file__).resolve().parents[3] / "docs" / "examples" / "fenced.py"


def test_the_docs_fenced_example(postgres_required: str) -> None:
    """The "Across machines" page's example: a cycle publishes to the coordinating
    database under fence(), another to a store checking fencing_token(), and the store
    refuses a cycle older than the last one that wrote there."""
    if not FENCED.exists():
        pytest.skip("the docs are not beside this suite")
    schema = f"s_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_required, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    dsn = make_conninfo(postgres_required, options=f"-c search_path={schema}")
    env = {**os.environ, "JOB_POSTGRES": dsn, "JOB_NAME": "nightly-report"}

    def poll(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(FENCED), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            check=False,
        )

    def fence_of_report() -> int:
        with psycopg.connect(dsn) as conn:
            return int(conn.execute("SELECT fence FROM report").fetchone()[0])

    try:
        here = poll()
        assert 0 == here.returncode, here.stderr
        assert here.stdout.startswith("published here: 42 rows (cycle ")
        assert here.stdout.endswith(")\npoll: ran\n")
        first = fence_of_report()
        there = poll("there")
        assert 0 == there.returncode, there.stderr
        assert there.stdout.startswith("published there: 42 rows (cycle ")
        assert fence_of_report() > first
        with psycopg.connect(dsn) as conn:  # a later cycle wrote there, from elsewhere
            conn.execute("UPDATE report SET fence = 9223372036854775806")
        stale = poll("there")
        assert 1 == stale.returncode
        assert "not published: a later cycle than" in stale.stderr
        assert 9223372036854775806 == fence_of_report()
    finally:
        close_postgres_sessions()
        with psycopg.connect(postgres_required, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
