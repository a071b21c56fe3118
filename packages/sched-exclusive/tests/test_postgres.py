"""What a network adds to the rules: a real PostgreSQL server, real processes, real signals.

The tests that take ``pg`` or ``postgres_required`` need ``SCHED_TEST_POSTGRES``
(``nox -s postgres`` starts a throw-away cluster); the ones that stop the
server's processes need it to run on this machine, and the proxy tests need
PgBouncer installed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import gc
import itertools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from sched_exclusive_servers import PgBouncer, holder_backend, local_backend, start_bouncer
from sched_exclusive_testkit import (
    DEADLINE,
    PgWorld,
    cli,
    close_postgres_sessions,
    watched_leases,
)
from sched_testing import Child

from sched_exclusive import (
    CoordinationError,
    Exclusive,
    Outcome,
    RunError,
    advisory_key,
    lock_lost,
)


def test_the_key_is_stable_and_documented() -> None:
    """``advisory_key`` is SHA-256 of the prefix and the name, its first 8 bytes signed."""
    import hashlib

    digest = hashlib.sha256(b"sched-exclusive\x00nightly-backup").digest()
    assert int.from_bytes(digest[:8], "big", signed=True) == advisory_key("nightly-backup")
    assert 4_808_812_862_493_589_041 == advisory_key("nightly-backup")


def test_two_holders_in_one_process_never_share_a_session(pg: PgWorld) -> None:
    """A second call in the same process, thread or job finds the lock busy (advisory
    locks are re-entrant within one session: each holder has its own)."""
    ex = pg.exclusive()
    inner: list[Outcome] = []
    in_thread: list[Outcome] = []

    def job() -> None:
        inner.append(ex.run_or_skip(lambda: None))
        worker = threading.Thread(target=lambda: in_thread.append(ex.run_or_skip(lambda: None)))
        worker.start()
        worker.join()

    assert Outcome.RAN == ex.run(job)
    assert ([Outcome.SKIPPED], [Outcome.SKIPPED]) == (inner, in_thread)


def test_the_table_is_created_once_even_by_racing_first_users(postgres_required: str) -> None:
    """Two first users at once in an empty schema both succeed; the table appears once."""
    import psycopg

    schema = f"s{os.getpid()}_{time.monotonic_ns()}"
    with psycopg.connect(postgres_required, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    dsn = f"{postgres_required} options='-c search_path={schema}'"
    try:
        results: list[Any] = []

        def first_use(name: str) -> None:
            try:
                results.append(Exclusive.postgres(dsn, name).run(lambda: None))
            except Exception as exc:  # reported below
                results.append(exc)

        threads = [threading.Thread(target=first_use, args=(f"job{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [Outcome.RAN] * 4 == results
        with psycopg.connect(dsn, autocommit=True) as conn:
            rows = conn.execute("SELECT name, queued FROM sched_exclusive ORDER BY name").fetchall()
        assert [(f"job{i}", 0) for i in range(4)] == rows
    finally:
        close_postgres_sessions()
        with psycopg.connect(postgres_required, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


HOLDER = """
import sys
from sched_exclusive import Exclusive
def job():
    print("running", flush=True)
    sys.stdin.readline()
print(Exclusive.postgres(sys.argv[1], sys.argv[2]).run(job), flush=True)
"""


def test_a_sigkilled_holder_frees_the_lock_within_50ms(pg: PgWorld, children: list[Child]) -> None:
    """A holder killed mid-job: PostgreSQL ends its session as the kernel closes the
    socket, and another process acquires within 50 ms; the demand it left is served."""
    holder = Child(HOLDER, pg.dsn, pg.name)
    children.append(holder)
    assert "running" == holder.read_line()
    ex = pg.exclusive()
    assert Outcome.QUEUED == ex.run(lambda: None)
    killed = time.monotonic()
    holder.process.send_signal(signal.SIGKILL)
    taken = None
    while taken is None and time.monotonic() - killed < DEADLINE:
        taken = pg.try_hold()
    acquired = time.monotonic() - killed
    assert taken is not None
    assert acquired <= 0.050, f"acquired {acquired * 1000:.1f} ms after SIGKILL"
    taken.unlock()
    assert -signal.SIGKILL == holder.process.wait()
    assert Outcome.RAN == ex.run(lambda: None)  # clears the orphaned request
    assert 0 == ex.pending()


def test_a_terminated_session_is_seen_by_the_job_and_stops_the_reruns(
    pg: PgWorld, caplog: pytest.LogCaptureFixture
) -> None:
    """pg_terminate_backend on the holder's session during a job: the job sees it
    (lock_lost), no rerun starts on the dead session, the call reports ENOLCK with
    outcome ran, the request queued meanwhile stays recorded, and a warning says why."""
    caplog.set_level(logging.WARNING, "sched_exclusive")
    ex = pg.exclusive()
    runs = 0
    seen: list[bool] = []

    def job() -> None:
        nonlocal runs
        runs += 1
        lost = lock_lost()
        assert not lost.is_set()
        assert Outcome.QUEUED == pg.exclusive().run(lambda: None)  # demand meanwhile
        pid = holder_backend(pg.conn, pg.name)
        assert pid is not None
        pg.conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        seen.append(lost.wait(DEADLINE))  # the monitor sees the socket close

    with pytest.raises(RunError) as caught:
        ex.run(job)
    assert [True] == seen
    assert 1 == runs
    assert Outcome.RAN == caught.value.outcome
    assert [errno.ENOLCK] == [getattr(e, "errno", None) for e in caught.value.exceptions]
    assert 1 == pg.counter()
    assert pg.lock_is_free()
    assert any(
        r.getMessage().startswith("cycle lock session lost; the running job is no longer guarded")
        for r in caplog.records
    )
    assert Outcome.RAN == ex.run(lambda: None)  # the next holder serves the demand


def test_a_session_lost_with_nothing_queued_is_reported(pg: PgWorld) -> None:
    """A session lost during a run with no request queued: the release reports it."""

    def job() -> None:
        pid = holder_backend(pg.conn, pg.name)
        assert pid is not None
        pg.conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        assert lock_lost().wait(DEADLINE)

    with pytest.raises(RunError) as caught:
        pg.exclusive().run(job)
    assert Outcome.RAN == caught.value.outcome
    [error] = caught.value.exceptions
    assert isinstance(error, OSError)
    assert errno.ENOLCK == error.errno
    assert "lost while the job ran" in str(error)


def test_lock_lost_outside_a_job_is_an_error() -> None:
    """lock_lost() answers only inside a job."""
    with pytest.raises(RuntimeError, match="only available inside a job"):
        lock_lost()


def test_lock_lost_is_never_set_for_a_directory(tmp_path: Path) -> None:
    """A flock lock cannot be lost while its holder lives: the event stays clear."""
    events: list[threading.Event] = []
    Exclusive(tmp_path).run(lambda: events.append(lock_lost()))
    assert [False] == [e.is_set() for e in events]


COUNTER = """
import sys
from sched_exclusive import Exclusive
from sched_exclusive._backend import enqueue
ex = Exclusive.postgres(sys.argv[1], sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
change = enqueue(10**9)
print(" ".join(str(ex._backend.update_counter(change)) for _ in range(int(sys.argv[3]))))
"""


def test_the_counter_is_exact_under_8_processes_x_1000_operations(
    pg: PgWorld, children: list[Child]
) -> None:
    """8 processes increment one counter 1,000 times each, at once: it ends at 8,000 and
    every value before a change was seen exactly once (no lost or doubled update)."""
    for _ in range(8):
        children.append(Child(COUNTER, pg.dsn, pg.name, "1000"))
    for child in children:
        assert "ready" == child.read_line()
    for child in children:
        child.write_line("go")
    seen = [int(v) for child in children for v in child.read_line().split()]
    assert 8000 == pg.counter()
    assert list(range(8000)) == sorted(seen)


def test_the_loop_ticks_while_a_statement_is_stalled(pg: PgWorld) -> None:
    """arun talks to the database off the loop: while a statement waits on a row that
    another session keeps locked (for the 0.5 s statement timeout), a task on the same
    loop that sleeps 10 ms keeps ticking: no gap reaches 250 ms (a loop blocked by the
    statement would show one gap of 500 ms or more; a loaded machine delays single ticks
    by tens of ms, which is not what this asserts). The statement timeout then ends the
    call with CoordinationError (ETIMEDOUT, outcome none) within the timeouts."""
    import psycopg

    pg.hold()  # busy: the request goes for the counter
    blocker = psycopg.connect(pg.dsn)  # a transaction left open on the row
    blocker.execute("SELECT queued FROM sched_exclusive WHERE name = %s FOR UPDATE", (pg.name,))
    ex = pg.exclusive(statement_timeout=0.5)
    ticks: list[float] = []

    async def ticker() -> None:
        loop = asyncio.get_running_loop()
        while True:
            ticks.append(loop.time())
            # sleep-ok: the ticking task whose regularity is under test
            await asyncio.sleep(0.01)

    async def main() -> tuple[BaseException | None, float]:
        task = asyncio.create_task(ticker())
        # sleep-ok: let the ticker start before the call
        await asyncio.sleep(0.02)
        started = time.monotonic()
        error: BaseException | None = None
        try:
            await ex.arun(nothing)
        except CoordinationError as exc:
            error = exc
        took = time.monotonic() - started
        task.cancel()
        return error, took

    # A full garbage collection (this process has made many objects by now) would
    # stall the loop by itself: keep it out of the measured stretch.
    gc.collect()
    gc.disable()
    try:
        error, took = asyncio.run(main())
    finally:
        gc.enable()
        blocker.close()
    assert isinstance(error, CoordinationError)
    assert (Outcome.NONE, errno.ETIMEDOUT) == (error.outcome, error.errno)
    assert took < 0.5 + 1.0 + 0.5, took
    gaps = [later - earlier for earlier, later in itertools.pairwise(ticks)]
    assert len(gaps) >= 10
    assert max(gaps) < 0.25, [round(g * 1000, 1) for g in gaps]


def test_the_gate_is_asked_on_the_loop_thread(pg: PgWorld) -> None:
    """With arun the rules run in a worker thread, but the gate is still called on the
    event loop's thread."""
    threads: list[int] = []

    def gate() -> bool:
        threads.append(threading.get_ident())
        return True

    async def main() -> Outcome:
        return await pg.exclusive(gate=gate).arun(nothing)

    assert Outcome.RAN == asyncio.run(main(), debug=True)
    assert [threading.get_ident()] == threads


def test_a_stopped_server_ends_the_call_within_the_timeouts(pg: PgWorld) -> None:
    """The server's processes stopped (SIGSTOP) mid-conversation: the client's deadline
    (statement timeout + 1 s) ends the call with CoordinationError, ETIMEDOUT, outcome
    none; nothing ran."""
    ex: Exclusive = pg.exclusive(statement_timeout=0.3)
    ex.run(lambda: None)  # its sessions are pooled now
    backend = ex._backend
    pids = backend.pool.idle_server_pids()  # type: ignore[attr-defined]
    if not pids or not all(local_backend(pid) for pid in pids):
        pytest.skip("the PostgreSQL server does not run on this machine")
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(CoordinationError) as caught:
            ex.run(lambda: pytest.fail("must not run"))
        took = time.monotonic() - started
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    assert (Outcome.NONE, errno.ETIMEDOUT) == (caught.value.outcome, caught.value.errno)
    assert took < 0.3 + 1.0 + 0.5, took
    assert Outcome.RAN == ex.run(lambda: None)  # fresh sessions once it answers


def test_an_unreachable_server_ends_the_call_within_the_connect_timeout() -> None:
    """A server that accepts the connection and never answers: connect_timeout ends the
    call with CoordinationError, ETIMEDOUT, outcome none."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        ex = Exclusive.postgres(f"hostaddr=127.0.0.1 port={port} user=x dbname=x", "job")
        started = time.monotonic()
        with pytest.raises(CoordinationError) as caught:
            Exclusive.postgres(
                f"hostaddr=127.0.0.1 port={port} user=x dbname=x", "job", connect_timeout=2
            ).run(lambda: pytest.fail("must not run"))
        took = time.monotonic() - started
        assert repr(ex) == "Exclusive.postgres(..., 'job', queue_capacity=1)"
    assert (Outcome.NONE, errno.ETIMEDOUT) == (caught.value.outcome, caught.value.errno)
    assert took < 2 + 1.5, took


def test_a_refused_connection_is_a_coordination_error() -> None:
    """Nothing listens: CoordinationError at once, outcome none, PostgreSQL's words kept."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(CoordinationError) as caught:
        Exclusive.postgres(f"hostaddr=127.0.0.1 port={port}", "job").run(lambda: None)
    assert Outcome.NONE == caught.value.outcome
    assert "PostgreSQL failed (connecting)" in str(caught.value)


@pytest.mark.parametrize(
    ("argument", "value", "error"),
    [
        ("name", "", ValueError),
        ("name", "a\0b", ValueError),
        ("name", b"x", TypeError),
        ("conninfo", None, TypeError),
        ("connect_timeout", 1, ValueError),
        ("statement_timeout", 0, ValueError),
        ("statement_timeout", float("nan"), ValueError),
        ("conninfo", "host='unterminated", ValueError),
    ],
)
def test_bad_arguments_are_refused(argument: str, value: object, error: type[Exception]) -> None:
    """Bad arguments fail at construction, naming what was wrong."""
    kwargs: dict[str, Any] = {"conninfo": "", "name": "job", argument: value}
    with pytest.raises(error, match=argument if argument != "name" else "name"):
        Exclusive.postgres(**kwargs)


def test_a_postgres_exclusive_has_no_directory() -> None:
    """dir, lock_path and queue_path belong to the flock backend."""
    ex = Exclusive.postgres("", "job")
    for attribute in ("dir", "lock_path", "queue_path"):
        with pytest.raises(AttributeError, match="coordinates through PostgreSQL"):
            getattr(ex, attribute)


async def nothing() -> None:
    """A no-op async job."""


FORKING = """
import os, sys
from sched_exclusive import Exclusive
holder = os.getpid()
runs = []
def job():
    runs.append(os.getpid())
    if len(runs) == 1:
        print("running", flush=True)
        sys.stdin.readline()
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        print("forked child exited", os.waitstatus_to_exitcode(status), flush=True)
        sys.stdin.readline()
outcome = Exclusive.postgres(sys.argv[1], sys.argv[2]).run(job)
print(outcome, len(runs), flush=True)
"""


def test_a_forked_child_never_releases_the_session_lock(pg: PgWorld, children: list[Child]) -> None:
    """A job that forks a child which ends with sys.exit(): the child's unwinding leaves
    the session (and the lock) to the holder; the holder serves the queued request."""
    holder = Child(FORKING, pg.dsn, pg.name)
    children.append(holder)
    assert "running" == holder.read_line()
    ex = pg.exclusive()
    assert Outcome.QUEUED == ex.run(lambda: pytest.fail("must not run here"))
    holder.write_line("fork")
    assert "forked child exited 0" == holder.read_line()
    assert Outcome.SKIPPED == ex.run_or_skip(lambda: pytest.fail("must not run here"))
    holder.write_line("")
    assert "ran-queued 2" == holder.read_line()
    assert 0 == holder.finish(), holder.stderr_text()


# --- a real PgBouncer in front of the server ------------------------------------------


def test_a_transaction_pooling_proxy_is_refused(pgbouncer: PgBouncer) -> None:
    """Behind PgBouncer in transaction (or statement) mode, session locks mean nothing:
    the call is refused with CoordinationError (outcome none) saying what to change, and
    nothing runs. In session mode it works."""
    mode = pgbouncer.mode
    ex = Exclusive.postgres(pgbouncer.dsn, f"bouncer-{mode}")
    if mode == "session":
        assert Outcome.RAN == ex.run(lambda: None)
        return
    for call in (ex.run, ex.run_or_skip):
        with pytest.raises(CoordinationError) as caught:
            call(lambda: pytest.fail("must not run behind a transaction pooler"))
        assert Outcome.NONE == caught.value.outcome
        assert "transaction-pooling proxy" in str(caught.value)
        assert "session mode" in str(caught.value)


def test_a_refused_transaction_pooler_is_left_as_it_was(postgres_required: str) -> None:
    """Through PgBouncer in transaction mode with one server connection, which another
    replica's session lock already lives in: the call is refused, nothing runs, the
    lock stays the other's, and the server connection keeps its own settings (the
    library sets its statement timeout and keepalives only on a session it accepted)."""
    import psycopg

    bouncer = start_bouncer(postgres_required, "transaction", pool_size=1)
    dsn = bouncer.dsn
    try:
        name = f"bouncer-pinned-{os.getpid()}"
        with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as other:
            other.execute("SELECT pg_advisory_lock(%s)", (advisory_key(name),))
            ex = Exclusive.postgres(dsn, name)
            for call in (ex.run, ex.run_or_skip):
                with pytest.raises(CoordinationError) as caught:
                    call(lambda: pytest.fail("must not run behind a transaction pooler"))
                assert Outcome.NONE == caught.value.outcome
                assert "transaction-pooling proxy" in str(caught.value)
            assert ("0",) == other.execute("SHOW statement_timeout").fetchone()
            assert ("0",) == other.execute("SHOW tcp_keepalives_idle").fetchone()
            assert (True,) == other.execute(
                "SELECT pg_advisory_unlock(%s)", (advisory_key(name),)
            ).fetchone()
    finally:
        close_postgres_sessions()
        bouncer.stop()


def test_status_reports_the_holder_without_taking_the_lock(
    pg: PgWorld, children: list[Child]
) -> None:
    """`status --postgres` says running, since when, which host and pid, and the queued
    count, from pg_locks and the row: the lock is never probed, so a request arriving
    meanwhile still finds the holder's lock busy."""
    idle = cli("status", "--postgres", pg.dsn, pg.name)
    assert (0, f"{pg.name}: idle; 0 queued requests\n") == (idle.returncode, idle.stdout)
    holder = Child(HOLDER, pg.dsn, pg.name)
    children.append(holder)
    assert "running" == holder.read_line()
    assert Outcome.QUEUED == pg.exclusive().run(lambda: None)
    shown = cli("status", "--postgres", pg.dsn, pg.name)
    assert 0 == shown.returncode, shown.stderr
    line = shown.stdout
    assert line.startswith(f"{pg.name}: running since ")
    assert f"host {socket.gethostname()}, pid {holder.process.pid}; 1 queued request\n" in line
    fields = json.loads(cli("status", "--postgres", pg.dsn, pg.name, "--json").stdout)
    assert ("running", 1, holder.process.pid) == (
        fields["state"],
        fields["pending"],
        fields["pid"],
    )
    assert holder_backend(pg.conn, pg.name) == fields["backend_pid"]
    holder.write_line("")
    assert "running" == holder.read_line()  # the rerun of the queued request
    holder.write_line("")
    assert "ran-queued" == holder.read_line()
    after = cli("status", "--postgres", pg.dsn, pg.name)
    assert after.stdout.startswith(f"{pg.name}: idle (last cycle started ")


def test_status_of_a_database_without_the_table(postgres_required: str) -> None:
    """Before any job ran, the table may not exist: idle, 0 queued, and a note."""
    import psycopg

    schema = f"empty{os.getpid()}"
    with psycopg.connect(postgres_required, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        dsn = f"{postgres_required} options='-c search_path={schema}'"
        shown = cli("status", "--postgres", dsn, "job")
        assert (0, "job: idle; 0 queued requests\n") == (shown.returncode, shown.stdout)
        assert "does not exist yet" in shown.stderr
        made = cli("init-postgres", dsn)
        assert 0 == made.returncode, made.stderr
        assert made.stdout.startswith(f"{schema}.sched_exclusive is ready")
        again = cli("init-postgres", dsn)  # idempotent
        assert made.stdout == again.stdout
    finally:
        with psycopg.connect(postgres_required, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def test_status_of_an_unreachable_database_exits_1() -> None:
    """A database that cannot be reached: exit status 1 and PostgreSQL's words."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    shown = cli("status", "--postgres", f"hostaddr=127.0.0.1 port={port}", "job")
    assert 1 == shown.returncode
    assert shown.stderr.startswith("python -m sched_exclusive status: PostgreSQL failed")


#: The docs' example of a replicated job (absent where the suite runs from a wheel).
REPLICA = Path(__file__).resolve().parents[3] / "docs" / "examples" / "replica.py"


def test_the_docs_replica_example_runs_and_queues(pg: PgWorld) -> None:
    """The "Across machines" page's example: a poll runs the cycle when the lock is free,
    and queues behind another replica's cycle when it is not."""
    if not REPLICA.exists():
        pytest.skip("the docs are not beside this suite")
    env = {**os.environ, "JOB_POSTGRES": pg.dsn, "JOB_NAME": pg.name}

    def poll() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(REPLICA)],
            env=env,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            check=False,
        )

    ran = poll()
    assert (0, "published: 42 rows\npoll: ran\n") == (ran.returncode, ran.stdout), ran.stderr
    other = pg.hold()  # another replica's cycle
    queued = poll()
    assert (0, "poll: queued\n") == (queued.returncode, queued.stdout), queued.stderr
    other.unlock()
    assert 1 == pg.counter()


# --- forks, the event loop, lost sessions ---------------------------------------------


def in_forked_child(body: Any) -> str:
    """Run ``body()`` in a real ``os.fork`` child; return the line it printed (or its error).

    The child never returns into pytest: it writes one line to a pipe and exits.
    """
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # forking with threads running
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        line = "child raised"
        try:
            line = str(body())
        except BaseException as exc:
            line = f"child raised {exc!r}"
        finally:
            os.write(write_end, line.encode() + b"\n")
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        line = answer.readline().decode().strip()
    os.waitpid(pid, 0)
    return line


def test_a_forked_child_never_touches_the_parents_idle_sessions(
    pg: PgWorld, tmp_path: Path
) -> None:
    """An Exclusive.postgres made before a fork works in the child on sessions of its
    own: the parent's pooled sessions are neither used (no statement goes out on their
    sockets) nor closed twice (a descriptor the child opened meanwhile stays its own),
    and the parent's sessions still serve the parent afterwards."""
    ex = pg.exclusive()
    assert Outcome.RAN == ex.run(lambda: None)  # the parent's sessions are pooled now
    victim_path = tmp_path / "victim"

    def child() -> str:
        victim = os.open(victim_path, os.O_RDWR | os.O_CREAT, 0o644)
        outcomes = [ex.run(lambda: None), ex.run(lambda: None), ex.pending()]
        os.fstat(victim)  # raises if the library closed it
        return f"{outcomes} {Path(f'/proc/self/fd/{victim}').readlink() == victim_path}"

    assert f"{[Outcome.RAN, Outcome.RAN, 0]} True" == in_forked_child(child)
    assert b"" == victim_path.read_bytes()
    assert Outcome.RAN == ex.run(lambda: None)


def test_a_child_forked_by_a_job_leaves_the_held_session_alone(pg: PgWorld) -> None:
    """A job forks a child (as a fork-based worker pool would) that asks for the count
    and queues a request: the child talks on sessions of its own, the holder's session
    keeps the lock through the child's life and exit, and the request is served."""
    ex = pg.exclusive()
    seen: list[object] = []
    runs = 0

    def child() -> str:
        counts = [ex.pending() for _ in range(20)]
        return f"{ex.run(lambda: None)} {max(counts)}"

    def job() -> None:
        nonlocal runs
        runs += 1
        if runs > 1:
            return
        holder = holder_backend(pg.conn, pg.name)
        seen.append(in_forked_child(child))
        seen.append(holder_backend(pg.conn, pg.name) == holder)
        seen.append(ex.pending())
        seen.append(lock_lost().is_set())

    assert Outcome.RAN_QUEUED == ex.run(job)
    assert [f"{Outcome.QUEUED} 0", True, 1, False] == seen
    assert 2 == runs


def test_asyncio_calls_never_share_a_held_session(
    pg: PgWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two arun calls on one coordinator, their statements on one thread (the library's
    executor cut to one worker): the second call's request is written by a session of
    its own, never by the first call's lock session (caught waiting on the row while
    the test holds it)."""
    from sched_exclusive import _offloop

    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        monkeypatch.setattr(_offloop, "_EXECUTOR", executor)
        asyncio.run(two_calls_on_one_thread(pg))


async def two_calls_on_one_thread(pg: PgWorld) -> None:
    """The body of the test above, on its event loop."""
    import psycopg

    ex = pg.exclusive()
    started = asyncio.Event()
    finish = asyncio.Event()

    async def first_job() -> None:
        started.set()
        await finish.wait()

    first = asyncio.create_task(ex.arun(first_job))
    await started.wait()
    holder = holder_backend(pg.conn, pg.name)
    with psycopg.connect(pg.dsn) as row_lock:  # a transaction holds the row
        row_lock.execute(
            "SELECT queued FROM sched_exclusive WHERE name = %s FOR UPDATE", (pg.name,)
        )
        second = asyncio.create_task(ex.arun(nothing))
        waiting = None
        deadline = time.monotonic() + DEADLINE
        while waiting is None and time.monotonic() < deadline:
            # sleep-ok: one yield per look at the server's own record of the wait
            await asyncio.sleep(0)
            row = pg.conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
                ("%FOR NO KEY UPDATE%",),  # a requester's change of the counter
            ).fetchone()
            waiting = None if row is None else int(row[0])
        row_lock.rollback()
    assert waiting is not None
    assert holder != waiting
    assert Outcome.QUEUED == await second
    finish.set()
    assert Outcome.RAN_QUEUED == await first


def test_a_lost_session_is_not_watched_after_the_call(pg: PgWorld) -> None:
    """A session ended under its holder (libpq drops the dead connection): once the
    call returns, the monitor watches nothing, so it can go back to sleep."""

    def job() -> None:
        pid = holder_backend(pg.conn, pg.name)
        assert pid is not None
        pg.conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        assert lock_lost().wait(DEADLINE)

    with pytest.raises(RunError):
        pg.exclusive().run(job)
    assert 0 == watched_leases()
