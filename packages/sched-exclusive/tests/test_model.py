"""The coalescing rules as a Hypothesis state machine, checked against a simple model.

It runs on each backend (real files; a real PostgreSQL database), in one
process: another holder is the world's second lock (it may take the lock,
release it without serving the queue — as a crashed or retiring process
would — or grab it right after our release); other requesters are other
coordinators; the hooked backend places them in the race windows (after
our first probe, around each of our releases). Each request runs a scripted job: per run, a
few foreign requests, a failure, or the gate closing.

The model is written from the specification, not from the implementation:
after every step the outcome, the number of runs, the errors (each with its
attempt), the log lines and the counter must match. Transient counter
failures are part of the world too: any of our counter calls may fail once,
and the demand must still be served or stay recorded.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from sched_exclusive_testkit import (
    FlockWorld,
    Held,
    PgWorld,
    World,
    close_postgres_sessions,
    hooked,
)

from sched_exclusive import CoordinationError, Outcome, RunError
from sched_exclusive._files import parse_count

MAX_RERUNS = 8


@dataclass(frozen=True)
class JobStep:
    """What one run of the job does."""

    foreign: tuple[bool, ...] = ()  # requests fired by other processes (True: queue mode)
    fail: bool = False
    close_gate: bool = False


@dataclass(frozen=True)
class Race:
    """Where other processes act around our call, and which counter calls fail."""

    release_after_probe: bool = False  # the other holder releases right after our probe
    slips: tuple[int, ...] = ()  # per release ordinal: requests queued just before it
    steals: frozenset[int] = frozenset()  # release ordinals after which another takes the lock
    # Our counter calls (reads and updates, counted together from 1) that fail
    # with EIO before touching the file: a transient error of the counter.
    fail_counter: frozenset[int] = frozenset()


@dataclass
class Model:
    """The world as the specification sees it."""

    capacity: int
    counter: int = 0
    other_holds: bool = False
    gate: bool = True

    def gate_open(self) -> bool:
        return self.gate

    def stolen(self) -> bool:
        return self.other_holds


@dataclass
class Expected:
    """What one request must do."""

    outcome: Outcome
    runs: int = 0
    # Each failure's attempt: 0 the own run, n the n-th rerun, None the counter's.
    attempts: list[int | None] = field(default_factory=list)
    coordination_error: bool = False
    messages: list[str] = field(default_factory=list)
    foreign: list[Outcome] = field(default_factory=list)


class CounterFailed(Exception):
    """The model's counter call that the race makes fail."""


def foreign_request(m: Model, queue: bool, expected: Expected) -> None:
    """Another process's request while the lock is held (by us)."""
    if not queue:
        expected.foreign.append(Outcome.SKIPPED)
    elif m.counter < m.capacity:
        m.counter += 1
        expected.foreign.append(Outcome.QUEUED)
    else:
        expected.foreign.append(Outcome.DISCARDED)


def predict(m: Model, queue: bool, script: list[JobStep], race: Race) -> Expected:
    """What the specification says one request does; updates the model."""
    cap = m.capacity
    releases = 0
    counter_calls = 0

    def counter_call() -> None:
        """One of our counter calls: it fails if the race says so."""
        nonlocal counter_calls
        counter_calls += 1
        if counter_calls in race.fail_counter:
            raise CounterFailed

    def release(expected: Expected) -> None:
        nonlocal releases
        releases += 1
        for _ in range(race.slips[releases - 1] if releases <= len(race.slips) else 0):
            foreign_request(m, True, expected)
        if releases in race.steals:
            m.other_holds = True

    if m.other_holds:
        # Busy at our probe; the other holder may release right after it.
        m.other_holds = not race.release_after_probe
        if not queue:
            return Expected(Outcome.SKIPPED, messages=["cycle lock busy; skipping tick"])
        try:
            counter_call()
        except CounterFailed:
            return Expected(Outcome.NONE, coordination_error=True)
        if m.counter >= cap:
            return Expected(
                Outcome.DISCARDED,
                messages=[
                    "cycle lock busy; rerun already queued; discarding request "
                    f"({m.counter} pending, capacity {cap})"
                ],
            )
        m.counter += 1
        if m.other_holds:  # the re-probe finds it busy too: only now is it "queued"
            return Expected(
                Outcome.QUEUED,
                messages=[
                    f"cycle lock busy; queued rerun request ({m.counter} pending, capacity {cap})"
                ],
            )
        own_entry = True
    else:
        own_entry = False
    expected = Expected(Outcome.RAN)
    # We hold the lock.
    if not m.gate:
        expected.outcome = Outcome.GATED
        expected.messages.append("cycle gate closed; skipping run")
        release(expected)
        return expected
    try:
        counter_call()
        if own_entry:
            m.counter -= 1
        elif m.counter:
            expected.messages.append(
                f"stale queued-run marker cleared at startup ({m.counter} pending)"
            )
            m.counter = 0
    except CounterFailed:
        expected.attempts.append(None)  # reported; the run starts all the same

    def run_job(attempt: int) -> None:
        step = script[expected.runs] if expected.runs < len(script) else JobStep()
        expected.runs += 1
        for queue_mode in step.foreign:
            foreign_request(m, queue_mode, expected)
        if step.close_gate:
            m.gate = False
        if step.fail:
            expected.attempts.append(attempt)

    run_job(0)
    reruns = 0
    held = True
    while True:
        try:
            counter_call()
        except CounterFailed:  # the read failed
            expected.attempts.append(None)
            if not held:
                break
            held = False
            release(expected)
            continue
        if m.counter == 0:
            if not held:
                break
            held = False
            release(expected)
            continue
        capped = reruns >= MAX_RERUNS
        if held:
            if capped or not m.gate_open():  # a method call: run_job may have closed it
                held = False  # retire: release, then look once more
                release(expected)
                continue
        elif not m.gate_open():
            expected.messages.append(
                f"cycle gate closed; deferring queued demand ({m.counter} pending)"
            )
            break
        elif capped:
            expected.messages.append(
                f"rerun cap reached; deferring queued demand ({m.counter} pending, cap 8)"
            )
            break
        handoff = not held
        if handoff:
            if m.stolen():
                break
            held = True
        try:
            counter_call()
            m.counter -= 1
        except CounterFailed:  # taking the entry failed
            expected.attempts.append(None)
            if not handoff:
                held = False
                release(expected)
                continue
            # a handoff runs for the demand it saw
        reruns += 1
        expected.messages.append(f"running queued cycle request (attempt {reruns})")
        run_job(reruns)
    if held:
        release(expected)
    expected.outcome = Outcome.RAN_QUEUED if reruns else Outcome.RAN
    return expected


job_steps = st.builds(
    JobStep,
    foreign=st.lists(st.booleans(), max_size=3).map(tuple),
    fail=st.booleans(),
    close_gate=st.integers(0, 5).map(lambda n: n == 0),
)
races = st.builds(
    Race,
    release_after_probe=st.booleans(),
    slips=st.lists(st.integers(0, 2), max_size=4).map(tuple),
    steals=st.frozensets(st.integers(1, 4), max_size=2),
    fail_counter=st.one_of(
        st.just(frozenset[int]()), st.frozensets(st.integers(1, 12), max_size=3)
    ),
)


class Collect(logging.Handler):
    """Keeps the records of our Exclusive's logger."""

    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__()
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Coalescing(RuleBasedStateMachine):
    """Requests, other holders, gate flips and counter writes, in any order."""

    #: Which backend the machine runs on (each TestCase below sets it).
    backend = "flock"

    def __init__(self) -> None:
        super().__init__()
        self.dir = ""
        self.world: World
        if self.backend == "flock":
            self.dir = tempfile.mkdtemp(prefix="sched-exclusive-model-")
            self.world = FlockWorld(self.dir)
        else:
            # The session's server (postgres_required makes sure there is one).
            self.world = PgWorld(os.environ["SCHED_TEST_POSTGRES"])
        self.model: Model | None = None
        self.other: Held | None = None
        self.gate = True
        self.logger = logging.getLogger(f"sched_exclusive.model.{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.INFO)
        self.records: list[logging.LogRecord] = []
        self.logger.addHandler(Collect(self.records))
        self.quiet = logging.getLogger(f"sched_exclusive.model.foreign.{id(self)}")
        self.quiet.propagate = False

    def teardown(self) -> None:
        if self.other is not None:
            self.other.unlock()
        self.logger.handlers.clear()
        self.world.close()
        if self.dir:
            shutil.rmtree(self.dir)
        else:
            close_postgres_sessions()

    @property
    def m(self) -> Model:
        assert self.model is not None
        return self.model

    @precondition(lambda self: self.model is None)
    @rule(capacity=st.integers(-1, 3))
    def configure(self, capacity: int) -> None:
        self.model = Model(capacity=max(capacity, 1))
        self.capacity = capacity

    @precondition(lambda self: self.model is not None and self.other is None)
    @rule()
    def other_takes_the_lock(self) -> None:
        self.other = self.world.hold()
        self.m.other_holds = True

    @precondition(lambda self: self.model is not None and self.other is not None)
    @rule()
    def other_releases_without_serving(self) -> None:
        assert self.other is not None
        self.other.unlock()
        self.other = None
        self.m.other_holds = False

    @precondition(lambda self: self.model is not None)
    @rule(is_open=st.booleans())
    def set_gate(self, is_open: bool) -> None:
        self.gate = self.m.gate = is_open

    @precondition(lambda self: self.model is not None)
    @rule(content=st.sampled_from([b"", b"0\n", b"1\n", b"2\n", b"5\n", b"-1\n", b"x\n", b"1"]))
    def write_counter(self, content: bytes) -> None:
        self.world.write_raw(content)
        self.m.counter = parse_count(content)

    @precondition(lambda self: self.model is not None)
    @rule(
        queue=st.booleans(),
        script=st.lists(job_steps, max_size=12),
        race=races,
        storm=st.booleans(),
    )
    def request(self, queue: bool, script: list[JobStep], race: Race, storm: bool) -> None:
        if storm:  # a relentless trigger source: every run gets a queued request
            script = [JobStep(foreign=(True,)) for _ in range(12)]
        expected = predict(self.m, queue, script, race)

        ex = self.world.exclusive(
            logger=self.logger, queue_capacity=self.capacity, gate=lambda: self.gate
        )
        backend = hooked(ex)
        foreign: list[Outcome] = []
        runs = 0

        def fire(queue_mode: bool) -> None:
            other = self.world.exclusive(logger=self.quiet, queue_capacity=self.capacity)
            foreign.append(
                other.run(lambda: None) if queue_mode else other.run_or_skip(lambda: None)
            )

        def steal() -> None:
            assert self.other is None
            self.other = self.world.hold()

        def release_other() -> None:
            if self.other is not None:
                self.other.unlock()
                self.other = None

        if race.release_after_probe:
            backend.after_probe[1] = release_other

        def slip_in(count: int) -> Callable[[], None]:
            def hook() -> None:
                for _ in range(count):
                    fire(True)

            return hook

        for ordinal, count in enumerate(race.slips, start=1):
            backend.before_release[ordinal] = slip_in(count)
        for ordinal in race.steals:
            backend.after_release[ordinal] = steal

        def job() -> None:
            nonlocal runs
            step = script[runs] if runs < len(script) else JobStep()
            runs += 1
            for queue_mode in step.foreign:
                fire(queue_mode)
            if step.close_gate:
                self.gate = False
            if step.fail:
                raise ValueError(f"run {runs} failed")

        for ordinal in race.fail_counter:
            backend.fail_counter[ordinal] = OSError(errno.EIO, "counter failed")

        self.records.clear()
        attempts: tuple[int | None, ...] = ()
        kinds: set[type[Exception]] = set()
        coordination_error = False
        try:
            outcome = ex.run(job) if queue else ex.run_or_skip(job)
        except RunError as exc:
            outcome = exc.outcome
            attempts = exc.attempts
            kinds = {type(e) for e in exc.exceptions}
        except CoordinationError as exc:
            outcome = exc.outcome
            coordination_error = True
        assert expected.outcome == outcome
        assert expected.coordination_error == coordination_error
        assert expected.runs == runs
        assert tuple(expected.attempts) == attempts
        assert kinds <= {ValueError, OSError}
        assert expected.foreign == foreign
        assert expected.messages == [r.getMessage() for r in self.records]
        assert self.m.other_holds == (self.other is not None)
        assert self.m.gate == self.gate

    @invariant()
    def counter_matches(self) -> None:
        if self.model is not None:
            assert self.m.counter == self.world.counter()

    @invariant()
    def lock_is_free_unless_the_other_holds_it(self) -> None:
        if self.other is None:
            assert self.world.lock_is_free()


TestCoalescing = Coalescing.TestCase
TestCoalescing.settings = settings(stateful_step_count=20)


class PostgresCoalescing(Coalescing):
    """The same machine over a real PostgreSQL database."""

    backend = "postgres"


# The state machine on PostgreSQL (skipped without a server, unless required).
TestCoalescingPostgres = pytest.mark.usefixtures("postgres_required")(PostgresCoalescing.TestCase)
TestCoalescingPostgres.settings = settings(stateful_step_count=20)
