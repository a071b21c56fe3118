"""Benchmark sched-exclusive's PostgreSQL backend against raw psycopg, in one run.

A no-op ``Exclusive.postgres(...).run`` cycle with the lock free (a tick or a
poll with nothing queued) makes five statements: take the lock, start the
cycle (settle the counter, draw the fencing token, record the holder: one
statement on the lock's session, committed without waiting), look at the
counter after the run, release, look once more. The floor runs the very same
statements, with the same parameters, through psycopg by hand, on the very
connection the coordinator holds its lock on (so the same server process
answers both). Also shown, in the
same run: ``arun`` (its statements run off the event loop), and the flock
backend's ``run`` on tmpfs, for scale.

Times are wall-clock (the server's work is in another process): the ops
are called in turn, one call each, and each round's mean per op is kept;
the table shows the median of the rounds. The script starts a throw-away cluster (initdb, a unix
socket in a temporary directory, fsync off; as the ``postgres`` user when
run as root) unless ``SCHED_BENCH_POSTGRES`` names a server; without
PostgreSQL installed it says so and writes no figures.

Usage: ``python bench/bench_sched_exclusive_postgres.py [--quick] [--output FILE]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from _common import Op, Report, divide, measure, plural, seconds

from sched_exclusive import Exclusive, advisory_key

QUIET = logging.getLogger("bench.sched_exclusive_postgres")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False
NAME = "bench"
#: ``Exclusive.postgres(...).run`` over raw psycopg, at most.
TARGET = 1.2


def tool(name: str) -> str | None:
    """A PostgreSQL server program: on PATH, else in Debian's versioned folders."""
    found = shutil.which(name)
    if found:
        return found
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (folder / name).exists():
            return str(folder / name)
    return None


@contextlib.contextmanager
def cluster() -> Iterator[str | None]:
    """A connection string: ``SCHED_BENCH_POSTGRES``, or a throw-away cluster's."""
    given = os.environ.get("SCHED_BENCH_POSTGRES")
    if given:
        yield given
        return
    initdb, pg_ctl = tool("initdb"), tool("pg_ctl")
    if initdb is None or pg_ctl is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="bench-pg-") as tmp:
        owner: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(tmp, "postgres")
            owner = ["runuser", "-u", "postgres", "--"]
        data = f"{tmp}/data"

        def run(*command: str) -> None:
            subprocess.run([*owner, *command], capture_output=True, check=True)

        run(initdb, "-D", data, "-A", "trust", "-U", "postgres")
        options = f"-c listen_addresses='' -k {tmp} -c fsync=off"
        run(pg_ctl, "-D", data, "-l", f"{tmp}/log", "-o", options, "-w", "start")
        try:
            yield f"host={tmp} user=postgres dbname=postgres"
        finally:
            run(pg_ctl, "-D", data, "-m", "immediate", "stop")


def noop() -> None:
    pass


async def anoop() -> None:
    pass


def floor_run(dsn: str, connections: int = 2) -> Op:
    """The same statements, by hand, through psycopg, as the backend sends them:
    the lock's and the start of the cycle on one connection (the lock session),
    the counter's looks on a second (a pooled session), both prepared from the
    first call on. With one connection, all five go on it (as a hand-written
    loop would)."""
    import psycopg

    from sched_exclusive import _pglease
    from sched_exclusive import _postgres as pg
    from sched_exclusive._pgsession import CLIENT_SETTING

    lock = psycopg.connect(dsn, autocommit=True, prepare_threshold=0)
    counter = (
        psycopg.connect(dsn, autocommit=True, prepare_threshold=0) if connections == 2 else lock
    )
    pid = lock.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
    token = "bench"  # the mark the backend leaves in each of its sessions
    lock.execute("SELECT set_config(%s, %s, false)", (CLIENT_SETTING, token))
    key = advisory_key(NAME)
    acquire = {
        "pid": pid,
        "token": token,
        "key": key,
        "high": (key >> 32) & 0xFFFFFFFF,
        "low": key & 0xFFFFFFFF,
    }
    start = {
        "pid": pid,
        "token": token,
        "name": NAME,
        "fresh": True,
        "host": socket.gethostname(),
        "client_pid": os.getpid(),
    }
    release = {"pid": pid, "token": token, "key": key}
    on_lock, on_counter = lock.execute, counter.execute
    start_sql = pg._start_sql("clear", always=True, tokens=True)

    def op() -> None:
        won, _, _ = on_lock(pg._ACQUIRE, acquire).fetchone()  # type: ignore[misc]
        assert won
        on_lock(start_sql, start).fetchone()  # autocommit: the library commits without waiting
        noop()
        on_counter(pg._READ, (NAME,)).fetchone()
        on_lock(_pglease._RELEASE, release).fetchone()
        on_counter(pg._READ, (NAME,)).fetchone()

    return op


def ours_run(ex: Exclusive) -> Op:
    run = ex.run

    def op() -> None:
        run(noop)

    return op


def ours_arun(dsn: str, batch: int) -> Op:
    arun = Exclusive.postgres(dsn, NAME, logger=QUIET).arun

    async def calls() -> None:
        for _ in range(batch):
            await arun(anoop)

    return lambda: asyncio.run(calls())


def flock_run(directory: str) -> Op:
    run = Exclusive(directory, logger=QUIET).run

    def op() -> None:
        run(noop)

    return op


def paired(ops: dict[str, Op], rounds: int, count: int) -> dict[str, float]:
    """Median seconds per call of each op, the ops called in turn, one call each.

    Round trips to a server depend on how awake its processes and this
    machine's cores are; calling the ops alternately puts every op through
    the same conditions, which rounds of one op at a time do not.
    """
    import statistics
    import time

    clock = time.perf_counter
    for op in ops.values():  # warm up: sessions opened, statements prepared
        for _ in range(max(count // 10, 10)):
            op()
    samples: dict[str, list[float]] = {name: [] for name in ops}
    for index in range(rounds):
        totals = dict.fromkeys(ops, 0.0)
        turn = list(ops.items())
        if index % 2:
            turn.reverse()  # whichever goes second gets a warmer server: alternate
        for _ in range(count):
            for name, op in turn:
                start = clock()
                op()
                totals[name] += clock() - start
        for name, total in totals.items():
            samples[name].append(total / count)
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--output", help="also write the Markdown to this file")
    args = parser.parse_args(argv)
    rounds, count = (3, 100) if args.quick else (15, 500)
    report = Report(
        "sched-exclusive",
        __file__,
        ["--quick"] if args.quick else [],
        f"Median of {rounds} rounds of {plural(count, 'call')} of each variant in turn, "
        "wall-clock. The baseline is raw psycopg running the same statements, with the same "
        "parameters, on two connections as the backend does: the lock's statements and the "
        "start of the cycle on one, the counter's looks on the other.",
        title="sched-exclusive on PostgreSQL",
    )
    report.section("Lock free, nothing queued: run a no-op job")
    with cluster() as dsn:
        if dsn is None:
            report.text("_Not measured: PostgreSQL is not installed here (no initdb)._")
        else:
            ours = Exclusive.postgres(dsn, NAME, logger=QUIET)
            ours.run(noop)  # the table, the row and the sessions exist from here on
            batch = max(count // 10, 10)
            with tempfile.TemporaryDirectory(
                dir="/dev/shm" if Path("/dev/shm").is_dir() else None
            ) as shm:
                floor = "raw psycopg: the same 5 statements on two connections"
                run = "Exclusive.postgres(...).run(no-op)"
                arun = f"Exclusive.postgres(...).arun(no-op), {plural(batch, 'call')} per loop"
                scale = "for scale: Exclusive(dir).run(no-op) on tmpfs"
                single = "for scale: raw psycopg, the same 5 statements on one connection"
                results = paired(
                    {
                        floor: floor_run(dsn),
                        run: ours_run(ours),
                        single: floor_run(dsn, connections=1),
                        scale: flock_run(shm),
                    },
                    rounds,
                    count,
                )
                loops = measure({arun: ours_arun(dsn, batch)}, rounds, max(count // batch, 3))
                order = [floor, run, arun, single, scale]
                results[arun] = loops[arun] / batch
                report.comparison({k: results[k] for k in order}, floor, figure="median per call")
                met = results[run] <= TARGET * results[floor]
                report.target("`Exclusive.postgres(...).run`", f"≤ {TARGET:.2f}x", met)
                report.summary(
                    "postgres",
                    seconds(results[run]),
                    seconds(results[floor]),
                    divide(results[run], results[floor]),
                    met,
                )
    report.write(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
