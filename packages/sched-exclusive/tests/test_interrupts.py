"""An exception from a signal handler, wherever it lands, never leaks a held lock.

A ``KeyboardInterrupt`` (or whatever a signal handler raises) surfaces only at
the points where CPython runs pending handlers: as a call returns, at a loop's
backward jump, as a function starts or a generator resumes.
:class:`sched_exclusive_testkit.Interrupter` raises one at the n-th such point
inside the library's own code (sched_exclusive and sched_lock), for every n,
and each time the call must propagate it with the cycle lock and the counter's
lock already free, while its traceback (and every frame in it) is still alive.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import CodeType

import pytest
from sched_exclusive_testkit import Interrupter, hooked, library_code

import sched_lock._flock
import sched_lock._slot
from sched_exclusive import Exclusive, ExclusiveError, Outcome, _coalesce, _exclusive, _files
from sched_lock import Lock, try_lock

CODES: frozenset[CodeType] = library_code(
    _coalesce, _exclusive, _files, sched_lock._flock, sched_lock._slot
)


@pytest.fixture
def directory(tmp_path: Path) -> Iterator[str]:
    """The lock directory; descriptors an interrupt left open on its files are closed
    (one landing as open() returns can lose a descriptor, never a lock)."""
    yield str(tmp_path)
    for entry in Path("/proc/self/fd").iterdir():
        try:
            target = entry.readlink()
        except FileNotFoundError:
            continue
        if target.is_relative_to(tmp_path):
            os.close(int(entry.name))


def assert_nothing_held(directory: str) -> None:
    """Neither the cycle lock nor the counter's transaction lock is held."""
    lock = try_lock(Path(directory, "cycle.lock"))
    assert lock is not None, "the cycle lock was left held"
    lock.unlock()
    fd = os.open(Path(directory, "cycle.queued"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if it was left held
    finally:
        os.close(fd)


def interrupt_everywhere(
    directory: str, call: Callable[[], object], others: list[Lock] | None = None
) -> int:
    """Run ``call`` once per interrupt point, interrupted there; return how many.

    ``others`` collects locks the scenario itself takes as "another process";
    they are released after each run, as the interrupt may have landed in the
    scenario's own release of them.
    """
    with Interrupter(CODES, 0):  # 3.12.1 sends no opcode events the first time: prime it
        call()
    n = 0
    while True:
        n += 1
        Path(directory, "cycle.queued").write_bytes(b"0\n")
        with warnings.catch_warnings():
            # A lock returned into the interrupt is collected at once: it is
            # released, with the ResourceWarning of an unreleased lock.
            warnings.simplefilter("ignore", ResourceWarning)
            # A coroutine created but interrupted before its first step.
            warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
            with Interrupter(CODES, n) as interrupter:
                interrupted: KeyboardInterrupt | None = None
                try:
                    call()
                except KeyboardInterrupt as exc:
                    interrupted = exc  # its traceback keeps every frame alive
                except ExclusiveError:
                    pass
        for lock in others or ():
            lock.unlock()
        if interrupted is not None:
            assert interrupter.fired
            assert_nothing_held(directory)
            continue
        assert not interrupter.fired
        assert_nothing_held(directory)
        return n - 1


def test_a_run_with_a_rerun(directory: str) -> None:
    """Acquisition, the run, a request queued by another caller, its rerun, release."""
    other = Exclusive(directory)
    ex = Exclusive(directory)

    def call() -> Outcome:
        runs: list[None] = []

        def job() -> None:
            if not runs:
                other.run(lambda: None)
            runs.append(None)

        return ex.run(job)

    points = interrupt_everywhere(directory, call)
    assert points > 100
    assert Outcome.RAN_QUEUED == call()


def test_a_reprobe_and_a_handoff(directory: str) -> None:
    """A requester that queues and then wins the re-probe, and a holder that takes the
    lock back for a request that slipped in before its release."""

    holders: list[Lock] = []

    def call() -> Outcome:
        ex = Exclusive(directory)
        backend = hooked(ex)
        backend.before_release[1] = lambda: Exclusive(directory).run(lambda: None)
        holder = try_lock(Path(directory, "cycle.lock"))
        assert holder is not None
        holders.append(holder)
        try:
            backend.after_probe[1] = holder.unlock
            return ex.run(lambda: None)
        finally:
            holder.unlock()

    points = interrupt_everywhere(directory, call, holders)
    assert points > 100
    assert Outcome.RAN_QUEUED == call()


def test_skip_queue_and_discard(directory: str) -> None:
    """The requester side: a busy lock skipped, queued, then discarded."""

    holders: list[Lock] = []

    def call() -> None:
        holder = try_lock(Path(directory, "cycle.lock"))
        assert holder is not None
        holders.append(holder)
        try:
            ex = Exclusive(directory)
            ex.run_or_skip(lambda: None)
            ex.run(lambda: None)
            ex.run(lambda: None)
        finally:
            holder.unlock()

    assert interrupt_everywhere(directory, call, holders) > 30


def test_asyncio(directory: str) -> None:
    """The asyncio driver, with a rerun."""
    other = Exclusive(directory)
    ex = Exclusive(directory)

    def call() -> Outcome:
        runs: list[None] = []

        async def job() -> None:
            if not runs:
                other.run(lambda: None)
            runs.append(None)

        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(ex.arun(job))
        finally:
            loop.close()

    assert interrupt_everywhere(directory, call) > 100
