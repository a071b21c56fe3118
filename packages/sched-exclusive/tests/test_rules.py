"""Every coalescing rule, one test each, in one process, on each backend.

A test that takes the ``world`` fixture runs on real files and on a real
PostgreSQL database: another holder is the world's second lock (a second
open of ``cycle.lock``, another session's advisory lock); another requester
is a second coordinator; :mod:`sched_exclusive_testkit`'s hooked backend
places them exactly inside the race windows. The tests of the files
themselves (garbage content, a directory in place of the counter, a closed
descriptor) take ``directory``.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sched_exclusive_testkit import Held, World, hooked, read_counter_file

from sched_exclusive import (
    CoordinationError,
    Exclusive,
    ExclusiveError,
    Outcome,
    RunError,
)
from sched_lock import Lock, try_lock

LOGGER = "sched_exclusive"


@pytest.fixture
def directory(tmp_path: Path) -> str:
    return str(tmp_path)


@pytest.fixture
def hold(directory: str) -> Iterator[Callable[[], Lock]]:
    """Take the cycle lock as "another process" would (a second open)."""
    taken: list[Lock] = []

    def take() -> Lock:
        lock = try_lock(Path(directory, "cycle.lock"))
        assert not lock.busy
        taken.append(lock)
        return lock

    yield take
    for lock in taken:
        lock.unlock()


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def lock_is_free(directory: str) -> bool:
    lock = try_lock(Path(directory, "cycle.lock"))
    if lock.busy:
        return False
    lock.unlock()
    return True


class Recorder:
    """A job that counts its runs and runs a scripted action in each."""

    def __init__(self, *actions: Callable[[], object]) -> None:
        self.runs = 0
        self.actions = list(actions)

    def __call__(self) -> None:
        self.runs += 1
        if self.actions:
            self.actions.pop(0)()


def test_lock_free_runs_once(world: World, caplog: pytest.LogCaptureFixture) -> None:
    """A free lock runs the job now: outcome ran, nothing queued, nothing logged."""
    caplog.set_level(logging.DEBUG, LOGGER)
    job = Recorder()
    assert Outcome.RAN == world.exclusive().run(job)
    assert 1 == job.runs
    assert [] == messages(caplog)
    assert world.lock_is_free()
    assert 0 == world.exclusive().pending()


def test_busy_queue_mode_queues_then_discards(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """A busy lock records one request (queued, "1\\n") and drops the next (discarded)."""
    caplog.set_level(logging.INFO, LOGGER)
    world.hold()
    ex = world.exclusive()
    job = Recorder()
    assert Outcome.QUEUED == ex.run(job)
    assert 1 == world.counter()
    assert Outcome.DISCARDED == ex.run(job)
    assert 1 == world.counter()
    assert 0 == job.runs
    assert 1 == ex.pending()
    assert [
        "cycle lock busy; queued rerun request (1 pending, capacity 1)",
        "cycle lock busy; rerun already queued; discarding request (1 pending, capacity 1)",
    ] == messages(caplog)
    assert [(world.label, 1, 1), (world.label, 1, 1)] == [
        (vars(r)[world.field], vars(r)["pending"], vars(r)["capacity"]) for r in caplog.records
    ]


@pytest.mark.parametrize(("capacity", "effective"), [(-5, 1), (0, 1), (1, 1), (3, 3)])
def test_capacity_bounds_the_queue(world: World, capacity: int, effective: int) -> None:
    """Up to ``capacity`` requests queue, the rest are discarded; below 1 means 1."""
    world.hold()
    ex = world.exclusive(queue_capacity=capacity)
    assert effective == ex.queue_capacity
    outcomes = [ex.run(Recorder()) for _ in range(effective + 2)]
    assert [Outcome.QUEUED] * effective + [Outcome.DISCARDED] * 2 == outcomes
    assert effective == ex.pending()


def test_skip_mode_skips_with_a_warning(world: World, caplog: pytest.LogCaptureFixture) -> None:
    """A busy lock in skip mode logs a warning, records nothing, runs nothing."""
    caplog.set_level(logging.INFO, LOGGER)
    world.hold()
    job = Recorder()
    assert Outcome.SKIPPED == world.exclusive().run_or_skip(job)
    assert 0 == job.runs
    assert 0 == world.counter()
    assert [(logging.WARNING, "cycle lock busy; skipping tick", world.label)] == [
        (r.levelno, r.getMessage(), vars(r)[world.field]) for r in caplog.records
    ]


def test_fresh_acquisition_clears_an_orphaned_counter(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """A counter left behind (crash, cap, gate) is cleared by the next run, with a warning."""
    caplog.set_level(logging.INFO, LOGGER)
    world.set_counter(3)
    job = Recorder()
    assert Outcome.RAN == world.exclusive().run_or_skip(job)
    assert 1 == job.runs
    assert 0 == world.counter()
    [record] = caplog.records
    assert logging.WARNING == record.levelno
    assert "stale queued-run marker cleared at startup (3 pending)" == record.getMessage()
    assert 3 == vars(record)["pending"]
    assert world.label == vars(record)[world.field]


def test_requests_queued_during_a_run_rerun_it(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """Each request queued meanwhile gets one rerun, each logged with its attempt ordinal."""
    caplog.set_level(logging.INFO, LOGGER)
    other = world.exclusive(queue_capacity=2)
    ex = world.exclusive(queue_capacity=2)
    outcomes: list[Outcome] = []
    job = Recorder(lambda: outcomes.extend([other.run(Recorder()), other.run(Recorder())]))
    assert Outcome.RAN_QUEUED == ex.run(job)
    assert [Outcome.QUEUED, Outcome.QUEUED] == outcomes
    assert 3 == job.runs
    assert 0 == ex.pending()
    reruns = [r for r in caplog.records if r.getMessage().startswith("running queued")]
    assert [
        "running queued cycle request (attempt 1)",
        "running queued cycle request (attempt 2)",
    ] == [r.getMessage() for r in reruns]
    assert [1, 2] == [vars(r)["attempt"] for r in reruns]


def test_run_or_skip_serves_queued_demand_too(world: World) -> None:
    """Skip mode's acquired path is run's: requests queued meanwhile are rerun."""
    other = world.exclusive()
    job = Recorder(lambda: other.run(Recorder()))
    assert Outcome.RAN_QUEUED == world.exclusive().run_or_skip(job)
    assert 2 == job.runs


def test_reruns_go_on_through_job_failures(world: World) -> None:
    """Every queued request is owed a run even when the runs fail; all errors are kept."""
    other = world.exclusive()
    failures = [ValueError("first"), KeyError("second"), OSError(errno.EIO, "third")]

    def job() -> None:
        if len(failures) > 1:
            other.run(lambda: None)  # one more request while this run fails
        raise failures.pop(0)

    with pytest.raises(RunError) as caught:
        world.exclusive().run(job)
    assert Outcome.RAN_QUEUED == caught.value.outcome
    assert ["'first'", "'second'", "third"] == [
        repr(e.args[0]) if not isinstance(e, OSError) else e.strerror
        for e in caught.value.exceptions
    ]
    assert (0, 1, 2) == caught.value.attempts
    assert caught.value.own is caught.value.exceptions[0]
    assert 0 == world.exclusive().pending()


def test_own_run_is_told_apart_from_the_reruns_it_served(world: World) -> None:
    """A call whose own run succeeded but that served another process's request whose
    rerun failed: the RunError says so, ``own`` is None and the failure is attempt 1, so
    a one-shot poll can exit by its own result as the Go apps do."""
    other = world.exclusive()
    rerun = RuntimeError("the rerun for another request failed")
    job = Recorder(lambda: other.run(lambda: None), lambda: (_ for _ in ()).throw(rerun))
    with pytest.raises(RunError) as caught:
        world.exclusive().run(job)
    assert (Outcome.RAN_QUEUED, (rerun,)) == (caught.value.outcome, caught.value.exceptions)
    assert ((1,), None) == (caught.value.attempts, caught.value.own)


def test_a_single_failure_keeps_outcome_ran(world: World) -> None:
    """A failed first run with nothing queued: RunError with outcome ran and that error."""
    boom = RuntimeError("boom")

    def job() -> None:
        raise boom

    with pytest.raises(ExclusiveError) as caught:
        world.exclusive().run(job)
    assert isinstance(caught.value, RunError)
    assert Outcome.RAN == caught.value.outcome
    assert (boom,) == caught.value.exceptions
    assert world.lock_is_free()


def test_rerun_cap_defers_demand(world: World, caplog: pytest.LogCaptureFixture) -> None:
    """At most 8 reruns per call; then a warning, and the demand stays recorded."""
    caplog.set_level(logging.INFO, LOGGER)
    other = world.exclusive()
    runs = 0

    def job() -> None:
        nonlocal runs
        runs += 1
        other.run(lambda: None)  # a relentless trigger source

    assert Outcome.RAN_QUEUED == world.exclusive().run(job)
    assert 9 == runs
    assert 1 == other.pending()
    warning = caplog.records[-1]
    assert logging.WARNING == warning.levelno
    assert "rerun cap reached; deferring queued demand (1 pending, cap 8)" == warning.getMessage()
    assert (world.label, 1, 8) == (
        vars(warning)[world.field],
        vars(warning)["pending"],
        vars(warning)["cap"],
    )
    # The next acquisition's run satisfies the deferred demand.
    caplog.clear()
    assert Outcome.RAN == other.run(lambda: None)
    assert (
        "stale queued-run marker cleared at startup (1 pending)" == caplog.records[0].getMessage()
    )
    assert 0 == other.pending()


def test_closed_gate_skips_the_initial_run(world: World, caplog: pytest.LogCaptureFixture) -> None:
    """A closed gate: outcome gated, nothing run, the counter untouched, one info line."""
    caplog.set_level(logging.INFO, LOGGER)
    world.set_counter(1)
    job = Recorder()
    ex = world.exclusive(gate=lambda: False)
    assert Outcome.GATED == ex.run(job)
    assert Outcome.GATED == ex.run_or_skip(job)
    assert 0 == job.runs
    assert 1 == world.counter()
    assert ["cycle gate closed; skipping run"] * 2 == messages(caplog)
    assert world.lock_is_free()


def test_closed_gate_still_records_requests(world: World) -> None:
    """The gate decides what runs, not what queues."""
    world.hold()
    assert Outcome.QUEUED == world.exclusive(gate=lambda: False).run(Recorder())
    assert 1 == world.counter()


def test_gate_closing_mid_run_defers_queued_demand(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """A gate that closes during the run stops the reruns; the demand stays."""
    caplog.set_level(logging.INFO, LOGGER)
    open_ = True
    other = world.exclusive()

    def job() -> None:
        nonlocal open_
        other.run(lambda: None)
        open_ = False  # shutdown requested while the run goes on

    ex = world.exclusive(gate=lambda: open_)
    assert Outcome.RAN == ex.run(job)
    assert 1 == ex.pending()
    assert "cycle gate closed; deferring queued demand (1 pending)" == messages(caplog)[-1]


def test_gate_is_consulted_before_every_start(world: World) -> None:
    """The gate is asked once before the first run and once before each rerun."""
    asked = 0

    def gate() -> bool:
        nonlocal asked
        asked += 1
        return True

    other = world.exclusive(queue_capacity=2)
    job = Recorder(lambda: (other.run(Recorder()), other.run(Recorder())))
    assert Outcome.RAN_QUEUED == world.exclusive(queue_capacity=2, gate=gate).run(job)
    assert 3 == job.runs
    assert 3 == asked


def test_a_raising_gate_counts_as_closed(world: World) -> None:
    """A gate that raises starts no run; its error is kept with outcome gated."""
    failure = RuntimeError("gate broke")

    def gate() -> bool:
        raise failure

    job = Recorder()
    with pytest.raises(RunError) as caught:
        world.exclusive(gate=gate).run(job)
    assert (Outcome.GATED, (failure,)) == (caught.value.outcome, caught.value.exceptions)
    assert 0 == job.runs
    assert world.lock_is_free()


def test_reprobe_serves_a_request_that_raced_the_release(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """Busy at the probe, free after queueing: the requester runs, taking its entry silently."""
    caplog.set_level(logging.INFO, LOGGER)
    holder = world.hold()
    ex = world.exclusive()
    backend = hooked(ex)
    backend.after_probe[1] = holder.unlock  # the runner releases right after our probe
    job = Recorder()
    assert Outcome.RAN == ex.run(job)
    assert 1 == job.runs
    assert 0 == world.counter()
    assert [] == messages(caplog)  # Go logs "queued" only for a request that stays queued


def test_reprobe_leaves_other_entries_for_reruns(world: World) -> None:
    """After a re-probe only the requester's own entry is taken; the others are rerun."""
    holder = world.hold()
    world.set_counter(1)  # someone else's request
    ex = world.exclusive(queue_capacity=2)
    hooked(ex).after_probe[1] = holder.unlock
    job = Recorder()
    assert Outcome.RAN_QUEUED == ex.run(job)
    assert 2 == job.runs
    assert 0 == ex.pending()


def test_reprobe_into_a_closed_gate_keeps_the_entry(world: World) -> None:
    """A re-probing requester that meets a closed gate leaves its own request queued."""
    holder = world.hold()
    ex = world.exclusive(gate=lambda: False)
    hooked(ex).after_probe[1] = holder.unlock
    assert Outcome.GATED == ex.run(Recorder())
    assert 1 == ex.pending()


def test_reprobe_failure_is_queued_with_an_error(world: World) -> None:
    """The request was recorded but the re-probe failed: outcome queued, with the error."""
    world.hold()
    ex = world.exclusive()
    hooked(ex).fail_probe[2] = OSError(errno.EIO, "probe failed", "cycle.lock")
    with pytest.raises(CoordinationError) as caught:
        ex.run(Recorder())
    assert Outcome.QUEUED == caught.value.outcome
    assert errno.EIO == caught.value.errno
    assert 1 == ex.pending()


def test_handoff_serves_a_request_that_slipped_in_before_release(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """A request recorded after the holder's last look is served by taking the lock back."""
    caplog.set_level(logging.INFO, LOGGER)
    ex = world.exclusive()
    backend = hooked(ex)
    late: list[Outcome] = []
    # Just before the release, another requester finds the lock busy, queues,
    # and its re-probe fails too: only the holder's post-release look is left.
    backend.before_release[1] = lambda: late.append(world.exclusive().run(lambda: None))
    job = Recorder()
    assert Outcome.RAN_QUEUED == ex.run(job)
    assert [Outcome.QUEUED] == late
    assert 2 == job.runs
    assert 0 == ex.pending()
    assert 2 == backend.probes  # the first probe and the handoff
    assert world.lock_is_free()
    assert "running queued cycle request (attempt 1)" == messages(caplog)[-1]


def test_handoff_yields_to_a_new_holder(world: World) -> None:
    """If another process took the lock after the release, the holder leaves it the demand."""
    ex = world.exclusive()
    backend = hooked(ex)
    taken: list[Held | None] = []
    backend.before_release[1] = lambda: world.exclusive().run(lambda: None)
    backend.after_release[1] = lambda: taken.append(world.try_hold())
    job = Recorder()
    try:
        assert Outcome.RAN == ex.run(job)
        assert 1 == job.runs
        assert 1 == ex.pending()  # the new holder's to serve
    finally:
        for lock in taken:
            assert lock is not None
            lock.unlock()


def test_handoff_respects_the_gate(world: World, caplog: pytest.LogCaptureFixture) -> None:
    """The gate is consulted before a handoff: closed, the slipped-in demand is deferred."""
    caplog.set_level(logging.INFO, LOGGER)
    open_ = True
    ex = world.exclusive(gate=lambda: open_)
    backend = hooked(ex)

    def slip_in_and_shut_down() -> None:
        nonlocal open_
        world.exclusive().run(lambda: None)
        open_ = False

    backend.before_release[1] = slip_in_and_shut_down
    job = Recorder()
    assert Outcome.RAN == ex.run(job)
    assert 1 == job.runs
    assert 1 == ex.pending()
    assert 1 == backend.probes
    assert "cycle gate closed; deferring queued demand (1 pending)" == messages(caplog)[-1]


def test_rerun_cap_counts_handoffs(world: World) -> None:
    """Reruns after handoffs count toward the same cap of 8 per call."""
    ex = world.exclusive()
    backend = hooked(ex)
    for ordinal in range(1, 20):
        backend.before_release[ordinal] = lambda: world.exclusive().run(lambda: None)
    job = Recorder()
    assert Outcome.RAN_QUEUED == ex.run(job)
    assert 9 == job.runs
    assert 1 == ex.pending()


def test_keyboard_interrupt_propagates_after_release(world: World) -> None:
    """KeyboardInterrupt in the job propagates at once, the lock released, demand kept."""
    other = world.exclusive()

    def job() -> None:
        other.run(lambda: None)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        world.exclusive().run(job)
    assert world.lock_is_free()
    assert 1 == other.pending()


def test_system_exit_in_a_rerun_propagates_after_release(world: World) -> None:
    """SystemExit from a rerun propagates at once, without further reruns."""
    other = world.exclusive()
    runs = 0

    def job() -> None:
        nonlocal runs
        runs += 1
        other.run(lambda: None)
        if runs == 2:
            raise SystemExit(3)

    with pytest.raises(SystemExit):
        world.exclusive().run(job)
    assert 2 == runs
    assert world.lock_is_free()


def test_missing_directory_is_an_error_with_outcome_none(tmp_path: Path) -> None:
    """A directory gone since construction: CoordinationError (an OSError), outcome none."""
    missing = tmp_path / "missing"
    missing.mkdir()
    exclusive = Exclusive(missing)
    missing.rmdir()
    for call in (exclusive.run, exclusive.run_or_skip):
        with pytest.raises(CoordinationError) as caught:
            call(Recorder())
        assert isinstance(caught.value, OSError)
        assert Outcome.NONE == caught.value.outcome
        assert errno.ENOENT == caught.value.errno
        assert str(missing / "cycle.lock") == caught.value.filename
    with pytest.raises(CoordinationError):
        exclusive.pending()
    assert not missing.exists()


def test_unusable_counter_at_acquisition_still_runs(directory: str) -> None:
    """A counter that cannot be settled before the first run is reported, and the job
    still runs (outcome ran), as Go's TestExclusiveReportsAcquisitionQueueError pins: the
    lock was won. The job clears the obstacle, so only the acquisition step failed."""
    blocked = Path(directory, "cycle.queued")
    blocked.mkdir()
    job = Recorder(blocked.rmdir)
    with pytest.raises(RunError) as caught:
        Exclusive(directory).run(job)
    assert Outcome.RAN == caught.value.outcome
    assert [errno.EISDIR] == [getattr(e, "errno", None) for e in caught.value.exceptions]
    assert 1 == job.runs
    assert lock_is_free(directory)


def test_unusable_counter_when_busy_is_outcome_none(
    directory: str, hold: Callable[[], Lock]
) -> None:
    """A request that cannot be recorded is not queued: outcome none."""
    hold()
    Path(directory, "cycle.queued").mkdir()
    with pytest.raises(CoordinationError) as caught:
        Exclusive(directory).run(Recorder())
    assert Outcome.NONE == caught.value.outcome


def test_reprobe_counter_failure_still_runs(world: World) -> None:
    """After a re-probe, failing to take the own entry is reported and the job still runs
    (outcome ran), as in Go; the entry left behind is served as demand, never lost."""
    holder = world.hold()
    ex = world.exclusive()
    backend = hooked(ex)
    backend.after_probe[1] = holder.unlock
    failure = OSError(errno.EIO, "counter failed")
    backend.fail_counter[2] = failure
    job = Recorder()
    with pytest.raises(RunError) as caught:
        ex.run(job)
    assert (Outcome.RAN_QUEUED, (failure,)) == (caught.value.outcome, caught.value.exceptions)
    assert 2 == job.runs  # the entry that could not be taken reads as one more request
    assert 0 == ex.pending()
    assert world.lock_is_free()


def test_counter_failure_in_the_consume_loop_still_hands_off(world: World) -> None:
    """A counter failure after the run stops consuming and releases the lock, and the
    post-release re-check still reads the counter: a request queued meanwhile is served
    by a handoff instead of waiting for the next tick."""
    ex = world.exclusive()
    backend = hooked(ex)
    failure = OSError(errno.EIO, "counter failed")
    backend.fail_counter[2] = failure  # the first look after the run
    late: list[Outcome] = []
    job = Recorder(lambda: late.append(world.exclusive().run(lambda: None)))
    with pytest.raises(RunError) as caught:
        ex.run(job)
    assert [Outcome.QUEUED] == late
    assert (Outcome.RAN_QUEUED, (failure,)) == (caught.value.outcome, caught.value.exceptions)
    assert 2 == job.runs
    assert 0 == ex.pending()
    assert 2 == backend.probes  # the first probe and the handoff
    assert world.lock_is_free()


def test_counter_failure_after_release_is_reported(directory: str) -> None:
    """Go's TestExclusiveReportsPostRunQueueError: a counter failure found only after the
    job (the gate closed during it, so no rerun) still reaches the caller; outcome ran."""
    open_ = True
    counter = Path(directory, "cycle.queued")

    def job() -> None:
        nonlocal open_
        open_ = False
        counter.unlink()
        counter.mkdir()

    with pytest.raises(RunError) as caught:
        Exclusive(directory, gate=lambda: open_).run(job)
    assert Outcome.RAN == caught.value.outcome
    assert caught.value.exceptions
    assert {errno.EISDIR} == {getattr(e, "errno", None) for e in caught.value.exceptions}
    assert lock_is_free(directory)


def test_holder_side_failure_is_kept_with_the_runs(world: World) -> None:
    """A counter failure after the run: RunError with outcome ran and the OSError."""
    ex = world.exclusive()
    failure = OSError(errno.EIO, "counter failed")
    hooked(ex).fail_counter[2] = failure  # the first look after the run
    job = Recorder()
    with pytest.raises(RunError) as caught:
        ex.run(job)
    assert (Outcome.RAN, (failure,)) == (caught.value.outcome, caught.value.exceptions)
    assert 1 == job.runs
    assert world.lock_is_free()


@pytest.mark.parametrize(
    "content", [b"", b"\n", b"garbage\n", b"-3\n", b"1", b"99999999999999999999999\n", b"\x00\xff"]
)
def test_unreadable_counter_reads_as_zero(directory: str, content: bytes) -> None:
    """Torn, empty, negative, huge or garbage counter content counts as zero, never fails."""
    Path(directory, "cycle.queued").write_bytes(content)
    ex = Exclusive(directory)
    expected = 1 if content == b"1" else 0
    assert expected == ex.pending()
    assert Outcome.RAN == ex.run(lambda: None)
    assert 0 == ex.pending()


def test_garbage_counter_when_busy_queues_one(directory: str, hold: Callable[[], Lock]) -> None:
    """A request over garbage content records "1\\n", the Go library's format."""
    hold()
    Path(directory, "cycle.queued").write_bytes(b"torn-garb")
    assert Outcome.QUEUED == Exclusive(directory).run(lambda: None)
    assert b"1\n" == read_counter_file(directory)


def test_garbage_holder_line_does_not_matter(directory: str) -> None:
    """A torn or garbage holder line never hinders a run, and is replaced by a fresh one."""
    Path(directory, "cycle.lock").write_bytes(b"\x00\x00 torn 2026-13-")
    assert Outcome.RAN == Exclusive(directory).run(lambda: None)
    line = Path(directory, "cycle.lock").read_bytes()
    assert line.endswith(b"Z\n")
    assert 1 == line.count(b"\n")


def test_no_descriptor_leaks(directory: str, hold: Callable[[], Lock]) -> None:
    """Every path (ran, reruns, queued, discarded, skipped, errors) closes what it opens."""
    before = sorted(p.name for p in Path("/proc/self/fd").iterdir())
    ex = Exclusive(directory)
    other = Exclusive(directory)
    ex.run(lambda: other.run(lambda: None))
    with pytest.raises(RunError):
        ex.run(lambda: 1 / 0)
    holder = hold()
    ex.run(lambda: None)
    ex.run(lambda: None)
    ex.run_or_skip(lambda: None)
    holder.unlock()
    assert before == sorted(p.name for p in Path("/proc/self/fd").iterdir())


def test_handoff_finds_the_demand_already_served(world: World) -> None:
    """A holder that came and went between our look and our re-acquisition served the
    request: the handoff runs nothing more, and releases."""
    ex = world.exclusive()
    backend = hooked(ex)
    backend.before_release[1] = lambda: world.exclusive().run(lambda: None)
    # Between our post-release look and our re-acquisition, another process
    # acquired, cleared the counter, ran and released.
    backend.after_probe[2] = lambda: world.set_counter(0)
    job = Recorder()
    assert Outcome.RAN == ex.run(job)
    assert 1 == job.runs
    assert 0 == ex.pending()
    assert world.lock_is_free()


def close_the_lock_descriptor(directory: str) -> None:
    """Close this process's descriptor on ``cycle.lock`` behind the holder's back, as a
    job that closes every descriptor it did not open (a daemonizing helper) does: the
    holder's own release then fails for real, with ``EBADF``."""
    lock_file = str(Path(directory, "cycle.lock"))
    found = [
        int(fd.name) for fd in Path("/proc/self/fd").iterdir() if os.path.realpath(fd) == lock_file
    ]
    assert 1 == len(found), found
    os.close(found[0])


def test_keyboard_interrupt_survives_a_failed_release(directory: str) -> None:
    """KeyboardInterrupt from the job propagates even when releasing the lock fails:
    the release error never replaces it."""

    def job() -> None:
        close_the_lock_descriptor(directory)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Exclusive(directory).run(job)
    assert lock_is_free(directory)


def test_a_failed_release_keeps_the_outcome(directory: str) -> None:
    """A release that fails after a run (here behind a gate closed mid-run, which makes
    the holder retire while it holds the lock) is a RunError carrying the outcome and
    the OSError, and the deferred demand stays recorded."""
    open_ = True
    other = Exclusive(directory)

    def job() -> None:
        nonlocal open_
        other.run(lambda: None)
        close_the_lock_descriptor(directory)
        open_ = False

    with pytest.raises(RunError) as caught:
        Exclusive(directory, gate=lambda: open_).run(job)
    assert Outcome.RAN == caught.value.outcome
    [failure] = caught.value.exceptions
    assert isinstance(failure, OSError)
    assert errno.EBADF == failure.errno
    assert 1 == other.pending()
    assert lock_is_free(directory)


def test_a_failed_release_behind_a_closed_gate_keeps_outcome_gated(directory: str) -> None:
    """A release that fails after a closed gate stopped the first run: RunError, outcome
    gated, nothing run."""

    def gate() -> bool:
        close_the_lock_descriptor(directory)
        return False

    job = Recorder()
    with pytest.raises(RunError) as caught:
        Exclusive(directory, gate=gate).run(job)
    assert Outcome.GATED == caught.value.outcome
    assert [errno.EBADF] == [getattr(e, "errno", None) for e in caught.value.exceptions]
    assert 0 == job.runs
    assert lock_is_free(directory)


def test_an_interrupt_outside_the_job_still_releases_first(world: World) -> None:
    """A KeyboardInterrupt that lands after the job returned, before the holder's
    bookkeeping (a SIGINT can arrive at any bytecode), propagates with the lock already
    released: not only once its traceback is dropped."""
    import inspect
    import sys
    import types

    from sched_exclusive import _driver

    if TYPE_CHECKING:
        from _typeshed import TraceFunction

    code = _driver.drive.__code__
    lines, first = inspect.getsourcelines(_driver.drive)
    [target] = [first + i for i, line in enumerate(lines) if "_resume(step, failure)" in line]
    fired: list[int] = []

    def local(frame: types.FrameType, event: str, arg: object) -> TraceFunction:
        if event == "line" and frame.f_lineno == target and not fired:
            fired.append(target)
            raise KeyboardInterrupt  # as a signal handler would, right there
        return local

    def tracer(frame: types.FrameType, event: str, arg: object) -> TraceFunction | None:
        return local if frame.f_code is code else None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        with pytest.raises(KeyboardInterrupt) as caught:
            world.exclusive().run(lambda: None)
    finally:
        sys.settrace(previous)
    assert [target] == fired
    assert caught.value.__traceback__ is not None  # the driver's frame is still referenced
    assert world.lock_is_free()


def test_a_failed_handoff_probe_is_reported_and_demand_kept(world: World) -> None:
    """The lock cannot be probed for a handoff: the error is reported with the outcome,
    and the request that slipped in stays recorded for the next run."""
    ex = world.exclusive()
    backend = hooked(ex)
    backend.before_release[1] = lambda: world.exclusive().run(lambda: None)
    failure = OSError(errno.EIO, "probe failed")
    backend.fail_probe[2] = failure
    job = Recorder()
    with pytest.raises(RunError) as caught:
        ex.run(job)
    assert (Outcome.RAN, (failure,)) == (caught.value.outcome, caught.value.exceptions)
    assert 1 == job.runs
    assert 1 == ex.pending()
    assert world.lock_is_free()


def test_a_handoff_whose_take_fails_still_runs(world: World) -> None:
    """Taking the entry after a handoff fails: reported, and the handoff runs for the
    demand it saw (as in Go); the entry left behind is one more rerun, never lost."""
    ex = world.exclusive()
    backend = hooked(ex)
    backend.before_release[1] = lambda: world.exclusive().run(lambda: None)
    failure = OSError(errno.EIO, "counter failed")
    # 1 clear, 2 read (0), release, 3 read (1), handoff, 4 take: fails.
    backend.fail_counter[4] = failure
    job = Recorder()
    with pytest.raises(RunError) as caught:
        ex.run(job)
    assert (Outcome.RAN_QUEUED, (failure,), (None,)) == (
        caught.value.outcome,
        caught.value.exceptions,
        caught.value.attempts,
    )
    assert 3 == job.runs
    assert 0 == ex.pending()
    assert world.lock_is_free()


def test_a_closed_gate_at_the_cap_logs_the_gate_as_go_does(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """At the rerun cap with the gate closed too, the holder releases, looks once more,
    and logs the gate's deferral (Go asks the gate first after its release)."""
    caplog.set_level(logging.INFO, LOGGER)
    open_ = True
    other = world.exclusive()
    runs = 0

    def job() -> None:
        nonlocal runs, open_
        runs += 1
        other.run(lambda: None)
        if runs == 9:
            open_ = False

    assert Outcome.RAN_QUEUED == world.exclusive(gate=lambda: open_).run(job)
    assert 9 == runs
    assert "cycle gate closed; deferring queued demand (1 pending)" == messages(caplog)[-1]
    assert 1 == other.pending()


def test_a_gate_that_raises_mid_run_stays_closed(world: World) -> None:
    """A gate that raises before a rerun defers the demand, counts as closed for the rest
    of the call, and its error is kept once."""
    other = world.exclusive()
    failure = RuntimeError("gate broke")
    asked = 0

    def gate() -> bool:
        nonlocal asked
        asked += 1
        if asked > 1:
            raise failure
        return True

    job = Recorder(lambda: other.run(lambda: None))
    with pytest.raises(RunError) as caught:
        world.exclusive(gate=gate).run(job)
    assert (Outcome.RAN, (failure,), (None,)) == (
        caught.value.outcome,
        caught.value.exceptions,
        caught.value.attempts,
    )
    assert (1, 2) == (job.runs, asked)
    assert 1 == other.pending()
