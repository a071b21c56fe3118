"""Exclusive.postgres under faults: a partition, a fork mid-check, a stalled database,
a transaction pooler, sessions the server ended while idle, an idle-session timeout.

Every test here runs against the real thing: a PostgreSQL server in a network
namespace whose link the test takes down, real PgBouncer, real signals.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import time
import uuid
from typing import Any

import pytest
from sched_exclusive_servers import Cluster, holder_backend, local_backend, start_bouncer
from sched_exclusive_testkit import DEADLINE, PgWorld, close_postgres_sessions
from sched_testing import Child

from sched_exclusive import CoordinationError, Exclusive, Outcome, advisory_key, lock_lost
from sched_exclusive._pglease import PgLease
from sched_exclusive._pgmonitor import SESSION_CHECK_INTERVAL
from sched_exclusive._pgsession import ANSWER_GRACE

# --- item 1: the loss bound does not grow with the locks a process holds --------------

#: Holds NAMES locks at once, one thread each, each job waiting for lock_lost();
#: prints "holding" once every job runs, then "told I T" as job I learns of the loss
#: (T: its CLOCK_MONOTONIC time, comparable with the test's).
MANY_HOLDER = """
import sys, threading, time
from sched_exclusive import Exclusive, lock_lost
dsn, prefix, count, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
running = threading.Barrier(count + 1)
def serve(i):
    def job():
        lost = lock_lost()
        running.wait()
        lost.wait()
        sys.stdout.write(f"told {i} {time.monotonic()!r}\\n")  # one write: threads share it
    try:
        Exclusive.postgres(dsn, f"{prefix}-{i}", statement_timeout=timeout).run(job)
    except Exception as exc:  # the lost lock's RunError: what matters is when it was told
        print(repr(exc), file=sys.stderr)
threads = [threading.Thread(target=serve, args=(i,)) for i in range(count)]
for thread in threads:
    thread.start()
running.wait()
print("holding", flush=True)
for thread in threads:
    thread.join()
"""


#: The fast variant: a 0.5 s statement timeout (the holder is told within 3.5 s) and
#: keepalives with which the server ends a silent session 4 to 6 s after the cut (4 s
#: idle, counted from the last check it answered, then 2 probes 1 s apart). The soak
#: variant (SCHED_SOAK=1) keeps the defaults: told within 8 s, freed after about 25 s.
FAST = (0.5, "keepalives_idle=4 keepalives_interval=1 keepalives_count=2 tcp_user_timeout=6000")
DEFAULTS = (5.0, "")


@pytest.mark.parametrize(
    ("count", "settings"),
    [
        pytest.param(8, FAST, id="8-names-fast"),
        pytest.param(
            8,
            DEFAULTS,
            id="8-names-defaults",
            marks=pytest.mark.skipif(
                os.environ.get("SCHED_SOAK") != "1", reason="a soak run (SCHED_SOAK=1)"
            ),
        ),
    ],
)
def test_a_partition_tells_every_held_lock_within_one_bound(
    far_postgres: Cluster, children: list[Child], count: int, settings: tuple[float, str]
) -> None:
    """One process holds 8 names through a link that is then cut: every job learns of
    the loss within the single-lock bound (a check interval plus one statement's
    deadline), before the server frees any of the locks, so no contender's run
    overlaps its old holder's (the checks of the held sessions run at once, not one
    after another, each under its own deadline)."""
    import psycopg

    statement_timeout, keepalives = settings
    bound = SESSION_CHECK_INTERVAL + statement_timeout + ANSWER_GRACE
    prefix = f"partition-{uuid.uuid4().hex[:8]}"
    holder = Child(
        MANY_HOLDER, f"{far_postgres.far_dsn} {keepalives}", prefix, str(count),
        str(statement_timeout),
    )  # fmt: skip
    children.append(holder)
    assert "holding" == holder.read_line(), holder.stderr_text()
    keys = [advisory_key(f"{prefix}-{i}") for i in range(count)]
    acquired: dict[int, float] = {}
    with psycopg.connect(far_postgres.dsn, autocommit=True) as contender:
        cut = time.monotonic()
        far_postgres.namespace.cut()  # type: ignore[union-attr]
        try:
            while len(acquired) < count and time.monotonic() - cut < 3 * DEADLINE:
                for i, key in enumerate(keys):
                    if i in acquired:
                        continue
                    row = contender.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
                    if row and row[0]:
                        acquired[i] = time.monotonic()  # the contender's run starts
                # sleep-ok: polling the server, through its socket, for the freed locks
                time.sleep(0.01)
            told: dict[int, float] = {}
            while len(told) < count:
                word, which, at = holder.read_line().split()
                assert "told" == word
                told[int(which)] = float(at)
        finally:
            far_postgres.namespace.heal()  # type: ignore[union-attr]
    assert count == len(acquired), "the server never freed the partitioned holder's locks"
    print(  # shown with -s: the figures the docs quote
        f"told after {sorted(round(at - cut, 2) for at in told.values())} s, "
        f"freed after {sorted(round(at - cut, 2) for at in acquired.values())} s"
    )
    late = {i: round(told[i] - cut, 2) for i in range(count) if told[i] - cut > bound + 1.5}
    assert {} == late, f"jobs told past the {bound:g} s bound (+1.5 s): {late}"
    overlaps = {i: round(told[i] - acquired[i], 3) for i in range(count) if acquired[i] < told[i]}
    assert {} == overlaps, f"a contender ran before its old holder's job was told: {overlaps}"


# --- item 2: a child forked while the monitor's check is in flight --------------------


def test_a_child_forked_during_a_check_returns_at_once(pg: PgWorld) -> None:
    """The holder's session backend stopped (SIGSTOP), so the monitor's check is in
    flight, holding the lease's turn, when the job forks: the child returns from the
    job and its call ends at once (it never waits for a turn only the parent's thread
    could give back), leaving the lock to the parent."""
    from sched_exclusive import _fence

    ex = pg.exclusive(statement_timeout=2)
    parent = os.getpid()
    read_end, write_end = os.pipe()
    answers: list[str] = []

    def job() -> None:
        cycle = _fence.RUNNING.get()  # the cycle this job runs as
        assert cycle is not None
        lease: PgLease = cycle.lease  # type: ignore[assignment]  # this backend's
        backend = holder_backend(pg.conn, pg.name)
        assert backend is not None
        if not local_backend(backend):
            pytest.skip("the PostgreSQL server does not run on this machine")
        os.kill(backend, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + SESSION_CHECK_INTERVAL + DEADLINE
            while not lease._turn.locked():  # the monitor's check is in flight
                assert time.monotonic() < deadline, "the monitor never checked"
                # sleep-ok: polling for the monitor's check to start (bounded above)
                time.sleep(0.005)
            child = os.fork()
            if child == 0:
                return  # the child leaves the job: its call must end at once
            ready, _, _ = select.select([read_end], [], [], 10)
            answers.append(os.read(read_end, 100).decode() if ready else "no answer in 10 s")
            if not ready:
                os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
        finally:
            if os.getpid() == parent:
                os.kill(backend, signal.SIGCONT)

    try:
        outcome: object = ex.run(job)
    except Exception as exc:  # the parent's lock was lost to the stopped backend
        outcome = exc
    if os.getpid() != parent:  # pragma: no cover - the forked child
        try:
            os.write(write_end, f"returned {outcome}".encode())
        finally:
            os._exit(0)
    os.close(read_end)
    os.close(write_end)
    assert [f"returned {Outcome.RAN}"] == answers


# --- item 3: a stalled database never starves the application's executor --------------


def test_a_stalled_database_leaves_the_default_executor_free(pg: PgWorld) -> None:
    """50 arun calls wait on a table another session keeps locked: the library's own,
    bounded executor waits for them, so a to_thread the application issues meanwhile
    (and getaddrinfo, which uses the same default executor) returns at once."""
    import psycopg

    blocker = psycopg.connect(pg.dsn)
    blocker.execute("LOCK TABLE sched_exclusive IN ACCESS EXCLUSIVE MODE")
    calls = 50

    async def main() -> tuple[float, list[object]]:
        loop = asyncio.get_running_loop()
        tasks = [
            asyncio.create_task(
                Exclusive.postgres(pg.dsn, f"{pg.name}-{i}", statement_timeout=3).arun(nothing)
            )
            for i in range(calls)
        ]
        # sleep-ok: the stall has lasted a while when the application needs its executor
        await asyncio.sleep(0.5)
        started = loop.time()
        await asyncio.to_thread(int)
        took = loop.time() - started
        blocker.rollback()  # the table is free again: the calls finish
        return took, await asyncio.gather(*tasks, return_exceptions=True)

    try:
        took, outcomes = asyncio.run(main())
    finally:
        blocker.close()
    print(f"an unrelated to_thread took {took * 1000:.1f} ms during the stall")  # with -s
    assert took < 0.25, f"an unrelated to_thread took {took:.3f} s during the stall"
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    assert all(isinstance(o, CoordinationError) for o in failures), failures
    assert all(o is Outcome.RAN for o in outcomes if not isinstance(o, BaseException))


async def nothing() -> None:
    """A no-op async job."""


# --- item 4: a transaction or statement pooler is refused every time -------------------

#: COUNT calls through a pooler; prints one line: "refused R ran N other O: texts".
POOLED_CALLS = """
import sys
from sched_exclusive import CoordinationError, Exclusive
dsn, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
ran = refused = 0
other = []
def job():
    global ran
    ran += 1
print("ready", flush=True)
sys.stdin.readline()
for _ in range(count):
    try:
        Exclusive.postgres(dsn, name).run(job)
    except CoordinationError as exc:
        if "transaction-pooling proxy" in str(exc) and "session mode" in str(exc):
            refused += 1
        else:
            other.append(str(exc))
    except Exception as exc:
        other.append(repr(exc))
print(f"refused {refused} ran {ran} other {len(other)}: {other[:3]!r}", flush=True)
"""


@pytest.mark.parametrize("mode", ["transaction", "statement"])
def test_every_call_through_a_transaction_pooler_is_refused(
    postgres_required: str, children: list[Child], mode: str
) -> None:
    """8 processes x 30 calls through PgBouncer in transaction (statement) mode: every
    call is refused with the advice to use session mode, no job runs, and no lock of the
    name is left in the pooler's server connections: a replica connecting directly
    then runs the job."""
    bouncer = start_bouncer(postgres_required, mode)
    name = f"pooled-{uuid.uuid4().hex[:8]}"
    try:
        for _ in range(8):
            children.append(Child(POOLED_CALLS, bouncer.dsn, name, "30"))
        for child in children:
            assert "ready" == child.read_line(), child.stderr_text()
        for child in children:
            child.write_line("go")
        results = [child.read_line() for child in children]
        direct = PgWorld(postgres_required, name)
        try:
            left = holder_backend(direct.conn, name)
            assert left is None, f"a lock of the name stayed in backend {left}"
            assert Outcome.RAN == direct.exclusive().run(lambda: None)
        finally:
            direct.close()
    finally:
        close_postgres_sessions()
        bouncer.stop()
    assert ["refused 30 ran 0 other 0: []"] * 8 == results


def test_a_session_pooler_that_does_not_reset_is_refused(
    postgres_required: str, children: list[Child]
) -> None:
    """PgBouncer in session mode with an empty server_reset_query hands a server session
    on as its client left it, a dead holder's lock included: the next client through it
    is refused, naming the reset query, instead of running or skipping for ever."""
    bouncer = start_bouncer(postgres_required, "session", pool_size=2, reset_query="")
    name = f"unreset-{uuid.uuid4().hex[:8]}"
    try:
        holder = Child(
            "import sys\nfrom sched_exclusive import Exclusive\n"
            "Exclusive.postgres(sys.argv[1], sys.argv[2]).run(lambda: (print('running', "
            "flush=True), sys.stdin.readline()))\n",
            bouncer.dsn,
            name,
        )
        children.append(holder)
        assert "running" == holder.read_line(), holder.stderr_text()
        holder.process.kill()
        holder.process.wait()
        with pytest.raises(CoordinationError) as caught:
            Exclusive.postgres(bouncer.dsn, name).run(lambda: pytest.fail("must not run"))
        assert Outcome.NONE == caught.value.outcome
        assert "server_reset_query" in str(caught.value)
    finally:
        close_postgres_sessions()
        bouncer.stop()


# --- item 5: sessions the server ended while idle --------------------------------------


def test_idle_sessions_the_server_ended_never_fail_a_call(pg: PgWorld) -> None:
    """The server ends every idle pooled session (pg_terminate_backend, as a restart or
    an idle reaper would): the next calls, made at once, all succeed, on new sessions."""
    names = [f"{pg.name}-{i}" for i in range(4)]
    exclusives: list[Exclusive] = [Exclusive.postgres(pg.dsn, n) for n in names]

    def nest(i: int) -> None:  # four lock sessions and a counter session at once
        if i < len(exclusives):
            exclusives[i].run(lambda: nest(i + 1))

    for _ in range(3):
        nest(0)
        first: Exclusive = exclusives[0]
        pool: Any = first._backend.pool  # type: ignore[attr-defined]
        idle = pool.idle_server_pids()
        assert len(idle) >= 4
        for pid in idle:
            pg.conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        outcomes = [ex.run(lambda: None) for ex in exclusives]
        assert [Outcome.RAN] * 4 == outcomes


# --- item 6: a role's idle_session_timeout --------------------------------------------


def test_a_role_idle_session_timeout_never_ends_a_held_lock(postgres_required: str) -> None:
    """A role whose idle_session_timeout (1.5 s) is shorter than the job: the library's
    sessions turn it off, as they set their statement timeout, so the held lock
    outlives the idle stretch and the job is never told it was lost."""
    import psycopg

    role = f"r318_idle_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_required, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"GRANT SELECT, INSERT, UPDATE ON sched_exclusive TO {role}")
        admin.execute(f"ALTER ROLE {role} SET idle_session_timeout = '1500ms'")
    try:
        seen: list[bool] = []

        def job() -> None:
            lost = lock_lost()
            # sleep-ok: the job outlasts the role's idle-session timeout (1.5 s)
            time.sleep(3)
            seen.append(lost.is_set())

        ex = Exclusive.postgres(f"{postgres_required} user={role}", f"idle-{uuid.uuid4().hex}")
        assert Outcome.RAN == ex.run(job)
        assert [False] == seen
    finally:
        close_postgres_sessions()
        with psycopg.connect(postgres_required, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


def test_an_armed_deadline_never_keeps_a_dropped_session(postgres_required: str) -> None:
    """An interrupt between arming a statement's deadline and disarming it drops the
    session: the deadline thread must not keep it (and its server backend) alive until
    the deadline, where a later call, or test, finds it."""
    import gc
    import weakref

    import psycopg

    from sched_exclusive._pgdeadline import deadlines
    from sched_exclusive._pgsession import Session

    conn = psycopg.connect(postgres_required, autocommit=True)
    try:
        session = Session(conn, conn.info.backend_pid)
        deadlines().arm(session, 60.0)  # never disarmed: the interrupt's case
        dropped = weakref.ref(session)
        del session
        gc.collect()
        assert dropped() is None
    finally:
        conn.close()
