"""run_loop's schedule as a state machine, checked step by step against a model.

The loop runs in its own thread with a synthetic clock. Its ``wait`` and its
job block until the test thread answers them, so each Hypothesis step is one
event of the outside world — the timer fires, the wait wakes early, stop is
set during a wait or a run, the timer fires as stop is set, a run returns or
raises — and after each step the loop's real state (waiting with which
deadline, running, returned) must equal the model's.
"""

from __future__ import annotations

import random
import threading
from datetime import timedelta
from typing import Literal

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from sched_loop_testkit import DEADLINE, band_ns, jitters

from sched_loop import run_loop

State = Literal["starting", "busy", "wait", "run", "done"]


class Boom(Exception):
    """The failure a job raises in the model."""


class World:
    """The loop's surroundings: a synthetic clock, a blocking wait and a blocking job."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.now = 0.0
        self.stop = threading.Event()
        self.state: State = "starting"
        self.epoch = 0
        self.timeout = 0.0
        self.deadline = 0.0
        self.runs = 0
        self.started_while_stopped = False
        self.error: BaseException | None = None
        self._reply: object = None
        self._answered = False

    # -- the loop thread's side --

    def clock(self) -> float:
        with self.cond:
            return self.now

    def wait(self, event: threading.Event, timeout: float) -> bool:
        assert event is self.stop
        if event.is_set():  # as Event.wait does
            return True
        with self.cond:
            self.timeout = timeout
            self.deadline = self.now + timeout
            reply = self._block("wait")
        assert isinstance(reply, bool)
        return reply

    def job(self, stop: threading.Event) -> None:
        assert stop is self.stop
        with self.cond:
            self.runs += 1
            self.started_while_stopped |= stop.is_set()
            reply = self._block("run")
        if isinstance(reply, BaseException):
            raise reply

    def _block(self, state: State) -> object:
        self._enter(state)
        if not self.cond.wait_for(lambda: self._answered, DEADLINE):
            raise AssertionError(f"the test never answered the loop's {state}")
        self._answered = False
        self.state = "busy"
        return self._reply

    def _enter(self, state: State) -> None:
        self.state = state
        self.epoch += 1
        self.cond.notify_all()

    def finished(self, error: BaseException | None) -> None:
        with self.cond:
            self.error = error
            self._enter("done")

    # -- the test thread's side --

    def settle(self, epoch: int) -> None:
        """Wait until the loop blocks again (or returns) after *epoch*."""
        with self.cond:
            if not self.cond.wait_for(lambda: self.epoch > epoch, DEADLINE):
                raise AssertionError(f"the loop did not block again; state {self.state}")

    def answer(self, reply: object) -> None:
        with self.cond:
            epoch = self.epoch
            self._reply = reply
            self._answered = True
            self.cond.notify_all()
        self.settle(epoch)


class LoopMachine(RuleBasedStateMachine):
    """Drive run_loop through arbitrary interleavings of timers, stops and runs."""

    def __init__(self) -> None:
        super().__init__()
        self.world = World()
        self.thread: threading.Thread | None = None
        self.interval = timedelta(seconds=1)
        self.jitter = 0.0
        # the model
        self.expected: State = "starting"
        self.expected_runs = 0
        self.expected_error: BaseException | None = None
        self.loop_deadline = 0.0  # the deadline of the delay being waited out

    @initialize(
        interval=st.integers(1, 10**12).map(lambda us: timedelta(microseconds=us)),
        jitter=jitters,
        fire_on_start=st.booleans(),
        stopped_before=st.sampled_from([False, False, False, True]),
        seed=st.integers(0, 2**32),
    )
    def start(
        self,
        interval: timedelta,
        jitter: float,
        fire_on_start: bool,
        stopped_before: bool,
        seed: int,
    ) -> None:
        self.interval, self.jitter = interval, jitter
        world = self.world
        if stopped_before:
            world.stop.set()

        def target() -> None:
            try:
                run_loop(
                    world.job,
                    interval,
                    jitter=jitter,
                    fire_on_start=fire_on_start,
                    stop=world.stop,
                    clock=world.clock,
                    wait=world.wait,
                    rng=random.Random(seed),
                )
            except BaseException as exc:  # recorded and compared with the model
                world.finished(exc)
            else:
                world.finished(None)

        self.thread = threading.Thread(target=target, name="run_loop under test", daemon=True)
        self.thread.start()
        world.settle(0)
        if stopped_before:
            self.expected = "done"
        elif fire_on_start:
            self._expect_run()
        else:
            self._expect_fresh_wait()

    # -- model transitions --

    def _expect_run(self) -> None:
        self.expected = "run"
        self.expected_runs += 1

    def _expect_fresh_wait(self) -> None:
        """A new delay started: its first timeout must be a draw from the band."""
        self.expected = "wait"
        lo, hi = band_ns(self.interval, self.jitter)
        assert "wait" == self.world.state
        assert lo // 1000 * 1000 / 1e9 <= self.world.timeout
        assert self.world.timeout < max(hi, lo + 1) / 1e9 + 1e-9
        self.loop_deadline = self.world.deadline

    def _waiting(self) -> bool:
        return self.expected == "wait"

    def _running(self) -> bool:
        return self.expected == "run"

    # -- rules: one outside event each --

    @precondition(_waiting)
    @rule()
    def timer_fires(self) -> None:
        """The wait times out at the delay's deadline with stop unset: a run starts."""
        self.world.now = self.loop_deadline
        self.world.answer(False)
        self._expect_run()

    @precondition(_waiting)
    @rule(part=st.floats(0.0, 0.9))
    def wakes_early(self, part: float) -> None:
        """The wait returns early without stop: the loop waits out the rest, runs nothing."""
        self.world.now += part * (self.loop_deadline - self.world.now)
        self.world.answer(False)
        if self.loop_deadline - self.world.now > 0:
            self.expected = "wait"
            assert abs(self.loop_deadline - self.world.deadline) < 1e-6
        else:
            self._expect_run()

    @precondition(_waiting)
    @rule(part=st.floats(0.0, 1.0))
    def stop_during_wait(self, part: float) -> None:
        """Stop is set while the loop waits: the wait wakes and the loop returns."""
        self.world.now += part * (self.world.deadline - self.world.now)
        self.world.stop.set()
        self.world.answer(True)
        self.expected = "done"

    @precondition(_waiting)
    @rule()
    def timer_fires_as_stop_is_set(self) -> None:
        """The tie: the wait reports a timeout but stop is set: no new run, the loop returns."""
        self.world.now = self.loop_deadline
        self.world.stop.set()
        self.world.answer(False)
        self.expected = "done"

    @precondition(_running)
    @rule()
    def stop_during_run(self) -> None:
        """Stop is set during a run: nothing happens until the run returns."""
        self.world.stop.set()

    @precondition(_running)
    @rule(duration=st.floats(0.0, 1e6))
    def run_returns(self, duration: float) -> None:
        """A run returns: drained if stop is set, else one fresh jittered delay starts."""
        self.world.now += duration
        self.world.answer(None)
        if self.world.stop.is_set():
            self.expected = "done"
        else:
            self._expect_fresh_wait()

    @precondition(_running)
    @rule()
    def run_raises(self) -> None:
        """A run raises: the exception ends the loop and propagates unchanged."""
        boom = Boom()
        self.world.answer(boom)
        self.expected = "done"
        self.expected_error = boom

    @precondition(lambda self: self.expected == "done")
    @rule()
    def returned_for_good(self) -> None:
        """Once returned, the loop is over: its thread ends and nothing else runs."""
        assert self.thread is not None
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive()

    # -- invariants --

    @invariant()
    def loop_is_where_the_model_says(self) -> None:
        """The loop's real state and run count equal the model's; no run began after stop."""
        if self.expected == "starting":
            return
        assert self.expected == self.world.state
        assert self.expected_runs == self.world.runs
        assert not self.world.started_while_stopped
        if self.expected == "done":
            assert self.expected_error is self.world.error

    def teardown(self) -> None:
        world = self.world
        if self.thread is None:
            return
        world.stop.set()
        if world.state == "wait":
            world.answer(True)
        elif world.state == "run":
            world.answer(None)
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive()


TestLoopMachine = LoopMachine.TestCase
# The deep Hypothesis profile (5 000 machines, a thread each) needs more than
# the suite's 120 s per-test timeout on a busy 2-core machine.
TestLoopMachine = pytest.mark.timeout(900)(TestLoopMachine)
