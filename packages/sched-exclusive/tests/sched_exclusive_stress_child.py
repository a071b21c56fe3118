"""A child process of the stress test: fires requests and journals every step.

Usage: ``python -u sched_exclusive_stress_child.py WHERE JOURNAL TAG CAPACITY SEED MODE [COUNT]``

``WHERE`` is the lock directory, or ``postgres:NAME`` for a job name in the
database ``SCHED_TEST_POSTGRES`` names.

The journal is one append-only file shared by every process. Each line is
written with a single ``write(2)`` on an ``O_APPEND`` descriptor, so lines
never interleave and their order in the file is the order they happened:

* ``start TAG`` / ``end TAG``: a job began / finished (written inside the job);
* ``cnt TAG N M``: a counter transaction changed N into M, written while the
  journal's own flock is held around the whole transaction (every process's
  counter changes go through it), so its place in the file is the
  transaction's place in the counter's history, whatever the backend;
* ``start TAG N M`` (the kill stress only): a job began, and the take that
  started its cycle changed N into M (one line, written with the journal's
  flock still held from the take, so it keeps the take's place);
* ``log TAG MESSAGE``: a coalescing log line of WARNING level or above;
* ``res TAG OUTCOME``: a call returned.

Modes: ``storm`` waits for ``go`` on stdin, fires COUNT requests (random
``run``/``run_or_skip``, random short jobs) and prints ``done``; ``holder``
and ``requester`` serve phase 2 (see the test), one command line at a time.
"""

from __future__ import annotations

import fcntl
import logging
import os
import random
import sys
import time
from collections.abc import Callable

from sched_exclusive import Exclusive, ExclusiveError, Outcome
from sched_exclusive._backend import Backend, Change, Lease, Started


class Journal:
    def __init__(self, path: str, tag: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.path = path
        self.tag = tag

    def write(self, *words: object) -> None:
        os.write(
            self.fd, (" ".join([str(words[0]), self.tag, *map(str, words[1:])]) + "\n").encode()
        )


class JitteredLease:
    def __init__(self, inner: Lease, jitter: Callable[[], None]) -> None:
        self.inner = inner
        self.jitter = jitter

    @property
    def locked(self) -> bool:
        return self.inner.locked

    def unlock(self) -> None:
        self.jitter()  # widen the window between the last look and the release
        self.inner.unlock()
        self.jitter()  # and the one between the release and the look after it


class Journaled:
    """The real backend, journaling each counter change in the counter's history order.

    It also waits a random few microseconds after each failed probe and
    after each release, which widens the race windows the rules exist for
    (a request between its probe and its increment; a holder around its
    release) so that the races happen often.
    """

    def __init__(
        self, inner: Backend, journal: Journal, rng: random.Random, *, into_job: bool = False
    ) -> None:
        self.inner = inner
        self.journal = journal
        self.rng = rng
        # Held around each counter change and its journal line, by every process.
        self.order = os.open(journal.path + ".order", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        # With into_job, the start of a cycle keeps holding it until the job calls
        # started(): releasing it wakes a waiting process, which on a loaded machine
        # may take the CPU right there, between the take and the job's start, where
        # only the library's own steps should be measured. For the same reason the
        # take's journal line waits too: the job's first write carries it with its
        # start (``start TAG N M``), so no write of the test's lies in that window.
        self.into_job = into_job
        self.holding = False
        self.taken: tuple[int, int] | None = None

    def jitter(self) -> None:
        spin(self.rng.randrange(0, 80))

    def try_acquire(self) -> JitteredLease | None:
        lock = self.inner.try_acquire()
        if lock is None:
            self.jitter()
            return None
        return JitteredLease(lock, self.jitter)

    def read_counter(self, lease: Lease | None = None) -> int:
        return self.inner.read_counter(lease.inner if isinstance(lease, JitteredLease) else lease)

    def update_counter(self, fn: Change) -> int:
        fcntl.flock(self.order, fcntl.LOCK_EX)
        try:
            before = self.inner.update_counter(fn)
            if fn(before) != before:
                self.journal.write("cnt", before, fn(before))
            return before
        finally:
            fcntl.flock(self.order, fcntl.LOCK_UN)

    def start(
        self,
        lease: Lease,
        change: Change,
        *,
        always: bool = False,
        seen: Callable[[int], None] | None = None,
    ) -> Started:
        inner = lease.inner if isinstance(lease, JitteredLease) else lease
        fcntl.flock(self.order, fcntl.LOCK_EX)
        self.holding = True
        try:
            before, token, failed = self.inner.start(inner, change, always=always, seen=seen)
            runs = always or (failed is None and (change.kind == "clear" or before > 0))
            if failed is None and change(before) != before:
                if self.into_job and runs:
                    self.taken = (before, change(before))
                else:
                    self.journal.write("cnt", before, change(before))
            if not (self.into_job and runs):
                self.started()
            return before, token, failed
        except BaseException:
            self.started()
            raise

    def start_line(self) -> None:
        """The job's first step: journal ``start`` (with the take it serves, if any)."""
        taken, self.taken = self.taken, None
        if taken is None:
            self.journal.write("start")
        else:
            self.journal.write("start", *taken)
        self.started()

    def started(self) -> None:
        """The job has journaled its start: the order lock goes (if still held)."""
        if self.taken is not None:  # never started: the take is journaled on its own
            self.journal.write("cnt", *self.taken)
            self.taken = None
        if self.holding:
            self.holding = False
            fcntl.flock(self.order, fcntl.LOCK_UN)


class JournalHandler(logging.Handler):
    def __init__(self, journal: Journal) -> None:
        super().__init__(logging.WARNING)
        self.journal = journal

    def emit(self, record: logging.LogRecord) -> None:
        self.journal.write("log", record.getMessage())


def spin(microseconds: int) -> None:
    """Busy-wait: sleeps are too coarse to place a request inside a release."""
    deadline = time.perf_counter_ns() + microseconds * 1000
    while time.perf_counter_ns() < deadline:
        pass


def main() -> None:
    where, journal_path, tag, capacity, seed, mode = sys.argv[1:7]
    count = int(sys.argv[7]) if len(sys.argv) > 7 else 0
    rng = random.Random(int(seed))
    journal = Journal(journal_path, tag)
    logger = logging.getLogger(f"stress.{tag}")
    logger.addHandler(JournalHandler(journal))
    logger.propagate = False
    if where.startswith("postgres:"):
        dsn = os.environ["SCHED_TEST_POSTGRES"]
        ex = Exclusive.postgres(dsn, where[9:], logger=logger, queue_capacity=int(capacity))
    else:
        ex = Exclusive(where, logger=logger, queue_capacity=int(capacity))
    ex._backend = Journaled(ex._backend, journal, random.Random(rng.random()))

    def call(queue: bool, job: Callable[[], None]) -> None:
        try:
            outcome = ex.run(job) if queue else ex.run_or_skip(job)
        except ExclusiveError as exc:
            outcome = exc.outcome
            if outcome in (Outcome.NONE, Outcome.QUEUED):
                raise
        journal.write("res", outcome)
        print(outcome, flush=True)

    def short_job() -> None:
        journal.write("start")
        spin(rng.randrange(0, 1500))
        if rng.random() < 0.1:
            journal.write("end")
            raise RuntimeError("a failing run")
        journal.write("end")

    print("ready", flush=True)
    for line in sys.stdin:
        command = line.split()
        if command[0] == "go" and mode == "storm":
            for _ in range(count):
                call(rng.random() < 0.7, short_job)
                # sleep-ok: spreads the calls; not an ordering device
                time.sleep(rng.random() * 0.002)
            print("done", flush=True)
        elif command[0] == "go" and mode == "holder":
            delay = int(command[1])

            def ending_job(delay: int = delay) -> None:
                journal.write("start")
                print("ending", flush=True)
                spin(delay)
                journal.write("end")

            call(True, ending_job)
        elif command[0] == "go" and mode == "requester":
            spin(int(command[1]))

            def plain_job() -> None:
                journal.write("start")
                journal.write("end")

            call(True, plain_job)


if __name__ == "__main__":
    main()
