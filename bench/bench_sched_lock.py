"""Benchmark sched-lock against its floors and peers, in one run.

Measures, per operation, on the disk and on tmpfs (``/dev/shm``):

- ``try_lock`` + ``unlock`` (the holder line included) against a floor of the
  same system calls written by hand with the same bytes (open, flock, format
  the timestamp, pwrite, ftruncate, unlock, close), and against filelock,
  portalocker and fasteners doing a non-blocking acquire and release;
- ``SlotFile.mutate`` read-only and increment against floors doing the same
  system calls by hand.

The truncate-to-zero write pattern is measured too, for reference: on ext4
it forces the data out at close and costs some 20 times more.

Usage: ``python bench/bench_sched_lock.py [--quick] [--output FILE] [--dir DIR ...]``
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import Op, Report, divide, filesystem_type, measure, plural, seconds

from sched_lock import SlotFile, try_lock
from sched_lock._holder import format_holder_line

OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC


def holder_line_plain(ns: int) -> bytes:
    """Go's RFC3339Nano line, formatted plainly on every call."""
    seconds, fraction = divmod(ns, 1_000_000_000)
    t = time.gmtime(seconds)
    line = b"%04d-%02d-%02dT%02d:%02d:%02d" % (
        t.tm_year,
        t.tm_mon,
        t.tm_mday,
        t.tm_hour,
        t.tm_min,
        t.tm_sec,
    )
    if fraction:
        line += (b".%09d" % fraction).rstrip(b"0")
    return line + b"Z\n"


_second = [-1]
_prefix = [b""]


def holder_line(ns: int) -> bytes:
    """The floor's formatting: the date part formatted once per second, by hand."""
    seconds, fraction = divmod(ns, 1_000_000_000)
    if _second[0] != seconds:
        _prefix[0] = b"%04d-%02d-%02dT%02d:%02d:%02d" % time.gmtime(seconds)[:6]
        _second[0] = seconds
    if fraction:
        return b"%s.%sZ\n" % (_prefix[0], (b"%09d" % fraction).rstrip(b"0"))
    return _prefix[0] + b"Z\n"


# --- floors: the same system calls, by hand ---------------------------------


def floor_lock(path: str, *, format_line: Callable[[int], bytes] = holder_line) -> Op:
    def op() -> None:
        fd = os.open(path, OPEN_FLAGS, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        line = format_line(time.time_ns())
        os.pwrite(fd, line, 0)
        os.ftruncate(fd, len(line))
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    return op


def floor_lock_truncate_first(path: str) -> Op:
    def op() -> None:
        fd = os.open(path, OPEN_FLAGS, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        line = holder_line(time.time_ns())
        os.ftruncate(fd, 0)
        os.pwrite(fd, line, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    return op


def floor_lock_bare(path: str) -> Op:
    def op() -> None:
        fd = os.open(path, OPEN_FLAGS, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    return op


def floor_read(path: str) -> Op:
    def op() -> None:
        fd = os.open(path, OPEN_FLAGS, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.pread(fd, 512, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    return op


def floor_increment(path: str, *, truncate_first: bool = False) -> Op:
    def op() -> None:
        fd = os.open(path, OPEN_FLAGS, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        before = os.pread(fd, 512, 0)
        after = b"%d\n" % (int(before or b"0") + 1)
        if truncate_first:
            os.ftruncate(fd, 0)
        os.pwrite(fd, after, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    return op


# --- sched-lock ------------------------------------------------------------------


def ours_lock(path: str) -> Op:
    def op() -> None:
        lock = try_lock(path)
        assert lock
        lock.unlock()

    return op


def ours_lock_with(path: str) -> Op:
    def op() -> None:
        with try_lock(path):
            pass

    return op


def increment(before: bytes) -> bytes:
    return b"%d\n" % (int(before or b"0") + 1)


def ours_read(path: str) -> Op:
    mutate = SlotFile(path).mutate

    def op() -> None:
        mutate(bytes)  # bytes(before) is before: the read idiom

    return op


def ours_increment(path: str) -> Op:
    mutate = SlotFile(path).mutate

    def op() -> None:
        mutate(increment)

    return op


# --- peers ------------------------------------------------------------------------


def peer_filelock(path: str) -> Op:
    import filelock

    lock = filelock.FileLock(path)

    def op() -> None:
        lock.acquire(timeout=0)
        lock.release()

    return op


def peer_portalocker(path: str) -> Op:
    import portalocker

    lock = portalocker.Lock(path, mode="a", timeout=0, fail_when_locked=True)

    def op() -> None:
        lock.acquire()
        lock.release()

    return op


def peer_fasteners(path: str) -> Op:
    import fasteners  # type: ignore[import-untyped]

    lock = fasteners.InterProcessLock(path)

    def op() -> None:
        if not lock.acquire(blocking=False):
            raise RuntimeError("fasteners could not lock")
        lock.release()

    return op


# --- measurement ------------------------------------------------------------------

LOCK_FLOOR = "floor: open+flock+pwrite+ftruncate+close"
LOCK_OURS = "sched_lock try_lock+unlock"
FILELOCK = "filelock FileLock"


def bench_directory(report: Report, directory: str, rounds: int, count: int, peers: bool) -> None:
    work = tempfile.mkdtemp(prefix="bench-sched-lock-", dir=directory)
    try:

        def p(name: str) -> str:
            return str(Path(work, name))

        lock_ops: dict[str, Op] = {
            LOCK_FLOOR: floor_lock(p("floor.lock")),
            LOCK_OURS: ours_lock(p("ours.lock")),
            "sched_lock with try_lock()": ours_lock_with(p("ours-with.lock")),
            "floor, date formatted on every call": floor_lock(
                p("plain.lock"), format_line=holder_line_plain
            ),
            "open+flock+close (no holder line)": floor_lock_bare(p("bare.lock")),
            "truncate-first holder line (the trap)": floor_lock_truncate_first(p("trunc.lock")),
        }
        if peers:
            lock_ops |= {
                FILELOCK: peer_filelock(p("filelock.lock")),
                "portalocker Lock": peer_portalocker(p("portalocker.lock")),
                "fasteners InterProcessLock": peer_fasteners(p("fasteners.lock")),
            }
        read_ops: dict[str, Op] = {
            "floor: open+flock+pread+close": floor_read(p("floor.slot")),
            "sched_lock SlotFile.mutate (read)": ours_read(p("ours.slot")),
        }
        for name in ("floor.slot", "ours.slot"):
            Path(p(name)).write_bytes(b"1\n")
        increment_ops: dict[str, Op] = {
            "floor: open+flock+pread+pwrite+close": floor_increment(p("floor.counter")),
            "sched_lock SlotFile.mutate (increment)": ours_increment(p("ours.counter")),
            "truncate-first increment (the trap)": floor_increment(
                p("trunc.counter"), truncate_first=True
            ),
        }
        where = f"{directory} ({filesystem_type(work)})"
        locks = measure(lock_ops, rounds, count)
        report.section(f"Lock: acquire + release, in {where}")
        report.comparison(locks, LOCK_FLOOR, figure="median per op")
        report.section(f"SlotFile: read-only transaction, in {where}")
        report.comparison(
            measure(read_ops, rounds, count),
            "floor: open+flock+pread+close",
            figure="median per op",
        )
        report.section(f"SlotFile: increment transaction, in {where}")
        report.comparison(
            measure(increment_ops, rounds, count),
            "floor: open+flock+pread+pwrite+close",
            figure="median per op",
        )
        if "lock" not in report.rows:  # the first directory's figures
            ours, floor = locks[LOCK_OURS], locks[LOCK_FLOOR]
            report.summary("lock", seconds(ours), seconds(floor), divide(ours, floor))
            if FILELOCK in locks:
                peer = locks[FILELOCK]
                report.summary("filelock", seconds(ours), seconds(peer), divide(ours, peer))
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
    parser.add_argument("--no-peers", action="store_true", help="skip filelock & co.")
    args = parser.parse_args(argv)
    for ns in (0, 1_796_212_800_500_000_000, time.time_ns()):  # the floor writes our bytes
        assert format_holder_line(ns) == holder_line(ns) == holder_line_plain(ns)
    rounds, count = (3, 300) if args.quick else (15, 2000)
    dirs = args.dirs or [tempfile.gettempdir(), "/dev/shm"]
    report = Report(
        "sched-lock",
        __file__,
        [*(["--quick"] if args.quick else []), *(["--no-peers"] if args.no_peers else [])],
        f"Median of {rounds} interleaved rounds of {plural(count, 'operation')}, wall-clock. "
        "The baseline is the floor: the same system calls by hand, with the same bytes. "
        "The summary takes the first directory's figures.",
    )
    for directory in dirs:
        if Path(directory).is_dir():
            bench_directory(report, directory, rounds, count, peers=not args.no_peers)
    report.write(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
