"""Benchmark sched-exclusive against the floor of the system calls it must make, in one run.

Measures, per call, on the disk and on tmpfs (``/dev/shm``):

- ``Exclusive.run`` with a no-op job and the lock free (the common case of a
  tick or a poll with nothing queued) against a floor doing the same system
  calls by hand with the same bytes: take the lock and write the holder line
  (open, flock, pwrite, ftruncate), draw the cycle's fencing token (open
  ``cycle.fence``, pread, pwrite, close), settle the counter before the run
  and look at it after the run and again after the release (three flock'd
  reads of ``cycle.queued``), release (flock ``LOCK_UN``, close); and, for
  the record, the floor without the token, as it was before tokens;
- the same for ``arun`` with a no-op coroutine, inside one event loop;
- the busy paths against their floors: ``run_or_skip`` skipping (a failed
  probe) and ``run`` discarding (a failed probe, then a flock'd read of a
  full counter);
- for scale, a bare ``try_lock`` + ``unlock`` of sched-lock.

Usage: ``python bench/bench_sched_exclusive.py [--quick] [--output FILE] [--dir DIR ...]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import Op, Report, divide, filesystem_type, plural, seconds
from _common import measure as _measure

from sched_exclusive import Exclusive, Outcome
from sched_lock import SlotFile, try_lock
from sched_lock._holder import format_holder_line

OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
QUIET = logging.getLogger("bench.sched_exclusive")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


def parse(content: bytes) -> int:
    text = content.strip()
    return int(text) if text.isdigit() else 0


def read_counter(path: str) -> int:
    """One flock'd read of the counter, by hand."""
    fd = os.open(path, OPEN_FLAGS, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    count = parse(os.pread(fd, 512, 0))
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    return count


def noop() -> None:
    pass


async def anoop() -> None:
    pass


# --- floors: the same system calls, by hand -----------------------------------------


def draw_token(path: str) -> int:
    """The fencing token, by hand: read the last one, write the next in place."""
    fd = os.open(path, OPEN_FLAGS, 0o644)
    last = os.pread(fd, 64, 0)
    token = max(int(last) + 1 if last else 1, time.time_ns() // 1000)
    os.pwrite(fd, b"%d\n" % token, 0)
    os.close(fd)
    return token


def floor_run(directory: str, *, token: bool = True) -> Op:
    lock_path = f"{directory}/cycle.lock"
    queue_path = f"{directory}/cycle.queued"
    fence_path = f"{directory}/cycle.fence"

    def op() -> None:
        fd = os.open(lock_path, OPEN_FLAGS, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        line = format_holder_line(time.time_ns())
        os.pwrite(fd, line, 0)
        os.ftruncate(fd, len(line))
        if token:
            draw_token(fence_path)
        read_counter(queue_path)  # settle before the run (nothing stale)
        noop()
        read_counter(queue_path)  # nothing queued meanwhile
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        read_counter(queue_path)  # nothing slipped in before the release

    return op


def floor_busy(directory: str, *, then_counter: bool, warn: bool = False) -> Op:
    lock_path = f"{directory}/cycle.lock"
    queue_path = f"{directory}/cycle.queued"

    def op() -> None:
        fd = os.open(lock_path, OPEN_FLAGS, 0o644)
        with contextlib.suppress(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
        if then_counter:
            read_counter(queue_path)  # full: nothing to write
        if warn:  # the warning line the spec asks for, with its structured fields
            QUIET.warning("cycle lock busy; skipping tick", extra={"dir": directory})

    return op


def sched_lock_run(directory: str) -> Op:
    """The same steps through sched-lock's API: what the coalescing layer adds is the rest."""
    lock_path = f"{directory}/cycle.lock"
    fence_path = f"{directory}/cycle.fence"
    mutate = SlotFile(f"{directory}/cycle.queued").mutate

    def op() -> None:
        lock = try_lock(lock_path)
        assert lock
        draw_token(fence_path)
        parse(mutate(bytes))
        noop()
        parse(mutate(bytes))
        lock.unlock()
        parse(mutate(bytes))

    return op


# --- sched-exclusive ---------------------------------------------------------------------


def ours_run(directory: str) -> Op:
    run = Exclusive(directory, logger=QUIET).run

    def op() -> None:
        run(noop)

    return op


def ours_skip(directory: str) -> Op:
    run_or_skip = Exclusive(directory, logger=QUIET).run_or_skip

    def op() -> None:
        if run_or_skip(noop) is not Outcome.SKIPPED:
            raise RuntimeError("expected a skip")

    return op


def ours_discard(directory: str) -> Op:
    run = Exclusive(directory, logger=QUIET).run

    def op() -> None:
        if run(noop) is not Outcome.DISCARDED:
            raise RuntimeError("expected a discard")

    return op


def bare_lock(directory: str) -> Op:
    path = f"{directory}/bare.lock"

    def op() -> None:
        lock = try_lock(path)
        assert lock
        lock.unlock()

    return op


# --- asyncio: N calls inside one running loop, reported per call -----------------------


def async_ops(directory_floor: str, directory_ours: str, count: int) -> dict[str, Op]:
    arun = Exclusive(directory_ours, logger=QUIET).arun
    floor = floor_run(directory_floor)

    async def floor_batch() -> None:
        for _ in range(count):
            floor()
            await anoop()

    async def ours_batch() -> None:
        for _ in range(count):
            await arun(anoop)

    return {
        "floor, in a loop (await a no-op)": lambda: asyncio.run(floor_batch()),
        "Exclusive.arun(no-op)": lambda: asyncio.run(ours_batch()),
    }


# --- measurement ---------------------------------------------------------------------------


def measure(ops: dict[str, Op], rounds: int, count: int) -> dict[str, float]:
    """Median CPU seconds per call of each op.

    Process CPU time (user + system, system calls included) rather than wall
    time: nothing here ever waits, and on a shared 2-core machine wall time
    mostly measures the neighbours.
    """
    return _measure(ops, rounds, count, clock=time.process_time)


FREE_FLOOR = "floor: lock+holder line, token, 3 counter reads, release"
FREE_OURS = "Exclusive.run(no-op)"


def bench_directory(report: Report, directory: str, rounds: int, count: int) -> None:
    work = tempfile.mkdtemp(prefix="bench-sched-exclusive-", dir=directory)
    try:
        dirs = {name: Path(work, name) for name in ("floor", "ours", "floor-async", "ours-async")}
        for path in dirs.values():
            path.mkdir()
        where = f"{directory} ({filesystem_type(work)})"
        free = {
            FREE_FLOOR: floor_run(str(dirs["floor"])),
            "the floor without the token (before tokens)": floor_run(
                str(dirs["floor"]), token=False
            ),
            "the same steps through sched-lock's API": sched_lock_run(str(dirs["floor-async"])),
            FREE_OURS: ours_run(str(dirs["ours"])),
            "for scale: try_lock+unlock alone": bare_lock(str(dirs["ours"])),
        }
        results = measure(free, rounds, count)
        report.section(f"Lock free, nothing queued: run a no-op job, in {where}")
        report.comparison(results, FREE_FLOOR, figure="median per call")
        if "run" not in report.rows:  # the first directory's figures
            ours, floor = results[FREE_OURS], results[FREE_FLOOR]
            report.summary("run", seconds(ours), seconds(floor), divide(ours, floor))
        batch = max(count // 10, 10)
        batches = measure(
            async_ops(str(dirs["floor-async"]), str(dirs["ours-async"]), batch), rounds, 1
        )
        report.section(f"asyncio: arun a no-op coroutine, in {where}")
        report.text(f"{plural(batch, 'call')} per event loop; the figures are per call.")
        report.comparison(
            {name: value / batch for name, value in batches.items()},
            "floor, in a loop (await a no-op)",
            figure="median per call",
        )
        holders = [try_lock(dirs[name] / "cycle.lock") for name in ("floor", "ours")]
        for name in ("floor", "ours"):
            (dirs[name] / "cycle.queued").write_bytes(b"1\n")
        try:
            report.section(f"Lock busy, skip mode: skipped, in {where}")
            report.comparison(
                measure(
                    {
                        "floor: failed probe": floor_busy(str(dirs["floor"]), then_counter=False),
                        "floor: failed probe + the warning line": floor_busy(
                            str(dirs["floor"]), then_counter=False, warn=True
                        ),
                        "Exclusive.run_or_skip": ours_skip(str(dirs["ours"])),
                    },
                    rounds,
                    count,
                ),
                "floor: failed probe",
                figure="median per call",
            )
            report.section(f"Lock busy, queue full: discarded, in {where}")
            report.comparison(
                measure(
                    {
                        "floor: failed probe, counter read": floor_busy(
                            str(dirs["floor"]), then_counter=True
                        ),
                        "Exclusive.run": ours_discard(str(dirs["ours"])),
                    },
                    rounds,
                    count,
                ),
                "floor: failed probe, counter read",
                figure="median per call",
            )
        finally:
            for holder in holders:
                assert holder is not None
                holder.unlock()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--output", help="also write the Markdown to this file")
    parser.add_argument(
        "--dir",
        action="append",
        dest="dirs",
        help="directory to measure in (repeatable; default: the temp dir and /dev/shm)",
    )
    args = parser.parse_args(argv)
    rounds, count = (3, 300) if args.quick else (15, 2000)
    dirs = args.dirs or [tempfile.gettempdir(), "/dev/shm"]
    report = Report(
        "sched-exclusive",
        __file__,
        ["--quick"] if args.quick else [],
        f"Median of {rounds} interleaved rounds of {plural(count, 'call')}, in process CPU "
        "time. The baseline is the floor: the same system calls by hand, with the same bytes. "
        "The summary takes the first directory's figures.",
    )
    for directory in dirs:
        if Path(directory).is_dir():
            bench_directory(report, directory, rounds, count)
    report.write(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
