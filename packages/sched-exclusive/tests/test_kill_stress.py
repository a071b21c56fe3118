"""Holders SIGKILLed at random: how often does a dying holder lose a request it took?

Eight processes fire requests at one name (capacity 1, ``run`` and ``run_or_skip``
mixed, short jobs), each journaling every step as the storm of
``test_stress.py`` does; every 8 to 25 ms the process holding the lock is
SIGKILLed and replaced. A holder that dies after its counter take (or its
clear) committed and before the job it took it for started has lost that
request: that is an *incident*. The journal shows every one: a take journaled
by a process killed before its ``start``, or a take it committed but did not
live to journal (the next counter line then finds the count lower than the
journal says).

The take and the start of the cycle it serves are one step on both backends
(one statement on PostgreSQL), so the remaining window is the time between
that step's commit and the job's first instruction. CI runs a short variant
(a ``slow`` suite: once per run);
``SCHED_KILL_STRESS=1`` runs 3,000 kills per backend and holds both to at most
2 incidents per 1,000 kills (the figures are printed either way)::

    SCHED_KILL_STRESS=1 SCHED_TEST_POSTGRES=... pytest tests/test_kill_stress.py -s
"""

from __future__ import annotations

import os
import random
import select
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sched_exclusive_testkit import World
from sched_testing import Child

from sched_exclusive import advisory_key
from sched_exclusive._status import lock_holders

LONG = os.environ.get("SCHED_KILL_STRESS") == "1"
KILLS = 3000 if LONG else 60
TESTS = str(Path(__file__).resolve().parent)

# Forks a storm process per "spawn TAG SEED" line (answering its pid) and SIGKILLs the
# ones still alive on "quit". Forking from one process that has imported everything
# keeps up with a kill every few milliseconds, which starting interpreters cannot.
FORK_SERVER = """
import importlib.util, logging, os, random, signal, sys, time
sys.path.insert(0, sys.argv[1])
child = sys.argv[1] + "/sched_exclusive_stress_child.py"
spec = importlib.util.spec_from_file_location("storm", child)
storm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(storm)
from psycopg.conninfo import make_conninfo
from sched_exclusive import Exclusive, ExclusiveError
where, journal_path = sys.argv[2], sys.argv[3]
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps them
alive = []
def fire(tag, seed):
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    quiet = os.open(os.devnull, os.O_RDWR)
    os.dup2(quiet, 0)
    os.dup2(quiet, 1)
    rng = random.Random(seed)
    journal = storm.Journal(journal_path, tag)
    logger = logging.getLogger("kill." + tag)
    logger.addHandler(storm.JournalHandler(journal))
    logger.propagate = False
    if where.startswith("postgres:"):
        name = f"r3kill-{os.getpid()}"
        dsn = make_conninfo(os.environ["SCHED_TEST_POSTGRES"], application_name=name)
        ex = Exclusive.postgres(dsn, where[9:], logger=logger)
    else:
        ex = Exclusive(where, logger=logger)
    backend = storm.Journaled(ex._backend, journal, random.Random(rng.random()), into_job=True)
    ex._backend = backend
    def job():
        backend.start_line()
        storm.spin(rng.randrange(0, 1500))
        journal.write("end")
    while True:
        try:
            outcome = (ex.run if rng.random() < 0.7 else ex.run_or_skip)(job)
        except ExclusiveError as exc:
            outcome = exc.outcome
        journal.write("res", outcome)
        time.sleep(rng.random() * 0.002)  # sleep-ok: spreads the calls; not an ordering device
print("ready", flush=True)
for line in sys.stdin:
    command = line.split()
    if command[0] == "spawn":
        pid = os.fork()
        if pid == 0:
            try:
                fire(command[1], int(command[2]))
            except BaseException as exc:  # a death the killer did not cause: say so
                storm.Journal(journal_path, command[1]).write("died", type(exc).__name__)
            finally:
                os._exit(1)
        alive.append(pid)
        print(pid, flush=True)
    elif command[0] == "quit":
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        break
"""


@dataclass
class Losses:
    """What the journal shows of the kills."""

    kills: int = 0
    #: Requests taken (or cleared) by a holder that was killed before its job started.
    lost: int = 0
    #: Kills that lost at least one taken request.
    incidents: int = 0
    takes: int = 0
    starts: int = 0
    examples: list[str] = field(default_factory=list)


def read_losses(lines: list[str]) -> Losses:
    """Count, in journal order, the requests killed holders took and never ran."""
    losses = Losses()
    count = 0
    awaiting: dict[str, int] = {}  # tag -> requests it took, not yet started
    running: str | None = None
    # A killed holder's run never ends; the next holder may start before the killer
    # has journaled the kill.
    killed = {line.split(" ")[1] for line in lines if line.startswith("killed ")}
    # A storm process that died of an exception (not the killer's SIGKILL) released
    # the lock with its job unfinished: named as what it is, not as an overlap.
    died = [f"line {n}: {line}" for n, line in enumerate(lines) if line.startswith("died ")]
    assert not died, f"storm processes died of exceptions: {died[:5]}"
    for position, line in enumerate(lines):
        kind, tag, *rest = line.split(" ")
        if kind == "quit":
            # The harness tears the storm down, one SIGKILL at a time: a holder it
            # kills hands the lock to a process not yet killed, unjournaled.
            break
        if rest and kind in ("cnt", "start"):  # "start TAG N M": the take, then the start
            before, after = int(rest[0]), int(rest[1])
            if before < count:  # a take committed by a holder killed before it journaled it
                losses.lost += count - before
                losses.incidents += 1
                losses.examples.append(f"line {position}: {count - before} taken unjournaled")
            count = after
            if after < before:
                losses.takes += 1
                awaiting[tag] = awaiting.get(tag, 0) + before - after
        if kind == "start":
            assert running is None or running in killed, f"line {position}: overlap"
            running = tag
            losses.starts += 1
            awaiting.pop(tag, None)
        elif kind == "end":
            running = None
        elif kind == "killed":
            losses.kills += 1
            if running == tag:
                running = None
            taken = awaiting.pop(tag, 0)
            if taken:
                losses.lost += taken
                losses.incidents += 1
                losses.examples.append(f"line {position}: {tag} killed after taking {taken}")
    return losses


def holder_pid(world: World) -> int | None:
    """The pid of the process holding the lock now, if any."""
    if world.kind == "flock":
        holders = lock_holders(str(Path(world.label, "cycle.lock")))
        return holders[0] if holders else None
    key = advisory_key(world.label)
    row = world.conn.execute(  # type: ignore[attr-defined]
        "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
        "AND l.classid = %s::bigint::oid AND l.objid = %s::bigint::oid",
        ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF),
    ).fetchone()
    if row is None or not str(row[0]).startswith("r3kill-"):
        return None
    return int(str(row[0])[7:])


def where(world: World) -> str:
    return world.label if world.kind == "flock" else f"postgres:{world.label}"


@pytest.mark.slow
@pytest.mark.timeout(3600 if LONG else 300)
def test_killed_holders_lose_almost_no_taken_request(world: World, tmp_path: Path) -> None:
    """8 processes, capacity 1, the holder SIGKILLed every 8-25 ms: a holder dying
    between its take and its job's start is rare (at most 2 in 1,000 kills, in the
    long run), and the journal holds no overlap of living holders."""
    journal = tmp_path / "journal"
    journal_fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    server = Child(FORK_SERVER, TESTS, where(world), str(journal))
    rng = random.Random()
    seed = rng.randrange(2**32)
    tags: dict[int, str] = {}
    spawned = 0

    def spawn() -> None:
        nonlocal spawned
        spawned += 1
        server.write_line(f"spawn k{spawned} {seed + spawned}")
        tags[int(server.read_line())] = f"k{spawned}"

    try:
        assert "ready" == server.read_line()
        for _ in range(8):
            spawn()
        kills = 0
        started = time.monotonic()
        while kills < KILLS:
            # sleep-ok: the killer's cadence is the fault under test, not an ordering device
            time.sleep(rng.uniform(0.008, 0.025))
            pid = holder_pid(world)
            if pid is None or pid not in tags:
                continue
            pidfd = os.pidfd_open(pid)
            try:
                os.kill(pid, signal.SIGKILL)
                assert select.select([pidfd], [], [], 30)[0], "a killed holder lived on"
            finally:
                os.close(pidfd)
            os.write(journal_fd, f"killed {tags.pop(pid)}\n".encode())
            kills += 1
            spawn()
        took = time.monotonic() - started
    finally:
        os.write(journal_fd, b"quit storm\n")  # what follows is the teardown's
        server.write_line("quit")
        server.finish()
        server.reap()
        os.close(journal_fd)
    losses = read_losses(journal.read_text().splitlines())
    per_thousand = 1000 * losses.incidents / losses.kills
    print(
        f"{world.kind}: {losses.kills} kills in {took:.0f} s, {losses.starts} runs, "
        f"{losses.takes} takes: {losses.lost} taken requests lost in {losses.incidents} "
        f"incidents ({per_thousand:.1f} incidents and {1000 * losses.lost / losses.kills:.1f} "
        f"requests per 1,000 kills); seed {seed}; {losses.examples[:5]}",
        file=sys.stderr,
    )
    assert KILLS == losses.kills
    assert losses.takes > 0, "no request was ever taken: the storm did not queue"
    if LONG:
        assert per_thousand <= 2.0  # the target; see docs/across-machines.md for figures
    else:
        # A short run only shows the regime: at the 13-21 per 1,000 measured on a loaded
        # 2-core machine, more than 10 in 60 kills is a one-in-millions draw.
        assert losses.incidents <= 10


def test_the_journal_reader_counts_a_take_carried_by_a_start_line() -> None:
    """``start TAG N M`` is the take and the start at once (nothing lost); a take that
    no line journaled shows in the next counter line, and is the killed holder's."""
    lines = [
        "cnt k2 0 1",  # a request queued
        "start k1 1 0",  # k1's cycle took it and started: served
        "end k1",
        "cnt k3 0 1",
        "killed k1",  # k1 took that one too, and died before journaling anything
        "cnt k4 0 1",  # the count read 0, not 1: a take no line shows
        "start k4 1 0",
        "end k4",
    ]
    losses = read_losses(lines)
    assert (1, 1, 1, 2, 2) == (
        losses.kills,
        losses.incidents,
        losses.lost,
        losses.takes,
        losses.starts,
    )
    assert ["line 5: 1 taken unjournaled"] == losses.examples


def test_the_journal_reader_stops_where_the_storm_is_torn_down() -> None:
    """The teardown kills the storm's processes one by one, unjournaled: a holder it
    kills hands the lock to one still alive, which is no overlap (a stress run read
    one as such)."""
    lines = [
        "cnt k2 0 1",
        "start k1 1 0",  # k1 runs when the storm is torn down
        "quit storm",
        "log k2 stale queued-run marker cleared at startup (1 pending)",
        "start k2 1 0",  # k1 was killed by the teardown; k2 took the lock before its turn
    ]
    losses = read_losses(lines)
    assert (0, 1, 0) == (losses.kills, losses.starts, losses.incidents)
