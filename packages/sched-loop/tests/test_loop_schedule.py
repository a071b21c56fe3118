"""run_loop in synthetic time: cadence, jitter band, drain, the fired-and-stopped tie."""

from __future__ import annotations

import itertools
import math
import random
import threading
from datetime import timedelta

import pytest
from sched_loop_testkit import FakeTime

from sched_loop import LoopConfigError, run_loop


class Recorder:
    """A job that records the synthetic time of each run and stops after ``limit`` runs."""

    def __init__(self, ft: FakeTime, limit: int, duration: float = 0.0) -> None:
        self.ft = ft
        self.limit = limit
        self.duration = duration
        self.starts: list[float] = []
        self.ends: list[float] = []

    def __call__(self, stop: threading.Event) -> None:
        self.starts.append(self.ft.now)
        self.ft.now += self.duration
        self.ends.append(self.ft.now)
        if len(self.starts) == self.limit:
            stop.set()


def loop(ft: FakeTime, job: Recorder, interval: float | timedelta, **kwargs: object) -> None:
    stop = kwargs.pop("stop", threading.Event())
    assert isinstance(stop, threading.Event)
    run_loop(job, interval, stop=stop, clock=ft.clock, wait=ft.wait, **kwargs)  # type: ignore[arg-type]


def test_fire_on_start_runs_at_once_then_every_interval() -> None:
    """With fire_on_start the first run is at t0, then one run per interval, one wait each."""
    ft = FakeTime()
    job = Recorder(ft, limit=4)
    loop(ft, job, 10, fire_on_start=True)
    assert [1000.0, 1010.0, 1020.0, 1030.0] == job.starts
    assert [10.0, 10.0, 10.0] == ft.waits


def test_without_fire_on_start_the_first_run_waits_one_interval() -> None:
    """Without fire_on_start the first run comes after one full interval."""
    ft = FakeTime()
    job = Recorder(ft, limit=2)
    loop(ft, job, timedelta(minutes=1))
    assert [1060.0, 1120.0] == job.starts
    assert [60.0, 60.0] == ft.waits


def test_interval_is_the_gap_between_runs() -> None:
    """Each delay starts when the previous run returns: 3 s runs at 10 s start 13 s apart."""
    ft = FakeTime()
    job = Recorder(ft, limit=3, duration=3.0)
    loop(ft, job, 10, fire_on_start=True)
    assert [1000.0, 1013.0, 1026.0] == job.starts
    assert [10.0, 10.0] == [b - a for a, b in zip(job.ends, job.starts[1:], strict=False)]


def test_jittered_gaps_stay_in_the_band_and_vary() -> None:
    """With jitter 0.25 at 100 s every gap lies in [75, 125) s, and they spread over the band."""
    ft = FakeTime(now=0.0)
    job = Recorder(ft, limit=300)
    loop(ft, job, 100, jitter=0.25, rng=random.Random(5))
    gaps = [b - a for a, b in itertools.pairwise(job.starts)]
    assert all(75.0 - 1e-6 <= g < 125.0 + 1e-6 for g in gaps)
    assert min(gaps) < 80.0
    assert max(gaps) > 120.0


def test_startup_fire_is_never_jittered() -> None:
    """The startup fire happens at t0 exactly, whatever the jitter."""
    ft = FakeTime()
    job = Recorder(ft, limit=1)
    loop(ft, job, 100, jitter=0.9, fire_on_start=True)
    assert [1000.0] == job.starts
    assert [] == ft.waits


def test_the_first_delay_is_jittered_without_fire_on_start() -> None:
    """Without fire_on_start the first delay is drawn from the band like every other."""
    delays = set()
    for seed in range(20):
        ft = FakeTime()
        loop(ft, Recorder(ft, limit=1), 100, jitter=0.5, rng=random.Random(seed))
        delays.add(ft.waits[0])
        assert 50.0 <= ft.waits[0] < 150.0
    assert len(delays) > 1


def test_stop_during_a_run_lets_it_finish_and_starts_no_other() -> None:
    """Drain: stop set mid-run, the run completes, the loop returns without waiting again."""
    ft = FakeTime()
    events: list[str] = []

    def job(stop: threading.Event) -> None:
        events.append("start")
        if events.count("start") == 2:
            stop.set()  # as a signal would, in the middle of the run
            ft.now += 5
            events.append("finished after stop")

    run_loop(job, 10, fire_on_start=True, stop=threading.Event(), clock=ft.clock, wait=ft.wait)
    assert ["start", "start", "finished after stop"] == events
    assert [10.0] == ft.waits
    assert 1015.0 == ft.now


def test_stop_during_the_wait_returns_without_a_run() -> None:
    """Stop set while the loop waits wakes the wait and the loop returns; no new run."""
    ft = FakeTime()
    job = Recorder(ft, limit=100)
    stop = threading.Event()

    def set_halfway(ft: FakeTime, timeout: float) -> bool:
        ft.now += timeout / 2
        stop.set()
        return True

    ft.on_wait = set_halfway
    loop(ft, job, 10, fire_on_start=True, stop=stop)
    assert [1000.0] == job.starts
    assert 1005.0 == ft.now


def test_timer_firing_as_stop_is_set_starts_no_run() -> None:
    """The tie: the wait times out (returns False) while stop gets set; no new run starts."""
    ft = FakeTime()
    job = Recorder(ft, limit=100)
    stop = threading.Event()

    def fire_and_stop(ft: FakeTime, timeout: float) -> bool:
        ft.now += timeout
        stop.set()
        return False

    ft.on_wait = fire_and_stop
    loop(ft, job, 10, fire_on_start=True, stop=stop)
    assert [1000.0] == job.starts
    assert [10.0] == ft.waits


def test_stop_set_before_the_loop_starts_runs_nothing() -> None:
    """An already-set stop: no startup fire, no wait; the loop returns at once."""
    ft = FakeTime()
    job = Recorder(ft, limit=100)
    stop = threading.Event()
    stop.set()
    loop(ft, job, 10, fire_on_start=True, stop=stop)
    assert [] == job.starts
    assert [] == ft.waits


def test_an_early_wake_waits_out_the_rest_of_the_delay() -> None:
    """A wait that returns early (no stop) is followed by a wait for the remainder only."""
    ft = FakeTime()
    job = Recorder(ft, limit=1)
    woke: list[float] = []

    def early_once(ft: FakeTime, timeout: float) -> bool | None:
        if woke:
            return None
        woke.append(timeout)
        ft.now += 4
        return False

    ft.on_wait = early_once
    loop(ft, job, 10)
    assert [10.0, 6.0] == ft.waits
    assert [1010.0] == job.starts


def test_a_delay_longer_than_the_longest_timeout_is_waited_out_in_pieces() -> None:
    """Delays above threading.TIMEOUT_MAX are split into waits the lock accepts."""
    ft = FakeTime(now=0.0)
    interval = timedelta(days=300_000)
    job = Recorder(ft, limit=1)
    loop(ft, job, interval)
    assert all(w <= threading.TIMEOUT_MAX for w in ft.waits)
    assert len(ft.waits) > 1
    assert math.isclose(interval.total_seconds(), job.starts[0], rel_tol=1e-12)


def test_job_gets_the_stop_event_and_an_internal_one_without_stop() -> None:
    """job(stop) receives the caller's event; with stop=None an internal, unset Event."""
    ft = FakeTime()
    seen: list[threading.Event] = []

    class Done(Exception):
        pass

    def job(stop: threading.Event) -> None:
        seen.append(stop)
        if len(seen) == 3:
            raise Done

    with pytest.raises(Done):
        run_loop(job, 1, fire_on_start=True, clock=ft.clock, wait=ft.wait)
    assert 3 == len(seen)
    assert seen[0] is seen[1] is seen[2]
    assert not seen[0].is_set()

    mine = threading.Event()
    seen.clear()
    with pytest.raises(Done):
        run_loop(job, 1, stop=mine, clock=ft.clock, wait=ft.wait)
    assert [mine, mine, mine] == seen


def test_a_job_exception_propagates_and_ends_the_loop() -> None:
    """The loop never hides a failure: the job's exception leaves run_loop unchanged."""
    ft = FakeTime()
    boom = RuntimeError("boom")
    runs: list[int] = []

    def job(stop: threading.Event) -> None:
        runs.append(1)
        raise boom

    with pytest.raises(RuntimeError) as caught:
        run_loop(job, 1, fire_on_start=True, clock=ft.clock, wait=ft.wait)
    assert boom is caught.value
    assert [1] == runs


def test_job_return_value_is_ignored() -> None:
    """Whatever the job returns is ignored (the spec's Job has no result)."""
    ft = FakeTime()
    results: list[object] = ["ok", 1, None]

    def job(stop: threading.Event) -> object:
        value = results.pop()
        if not results:
            stop.set()
        return value

    run_loop(job, 1, fire_on_start=True, stop=threading.Event(), clock=ft.clock, wait=ft.wait)
    assert [] == results


@pytest.mark.parametrize(
    "interval",
    [0, -1, 0.0, timedelta(0), timedelta(seconds=-1), math.nan, math.inf, -math.inf],
)
def test_non_positive_or_non_finite_interval_is_a_config_error(interval: float) -> None:
    """A non-positive, NaN or infinite interval raises LoopConfigError before anything runs."""
    ran: list[int] = []
    with pytest.raises(LoopConfigError, match="interval"):
        run_loop(lambda stop: ran.append(1), interval, fire_on_start=True)
    assert [] == ran


@pytest.mark.parametrize("jitter", [-0.1, 1.0, 1.5, math.nan, math.inf, True])
def test_jitter_outside_zero_one_is_a_config_error(jitter: float) -> None:
    """A jitter outside [0, 1) (or NaN, inf, a bool) raises LoopConfigError, a ValueError."""
    ran: list[int] = []
    with pytest.raises(ValueError, match="jitter"):
        run_loop(lambda stop: ran.append(1), 10, jitter=jitter, fire_on_start=True)
    assert [] == ran


def test_wrong_types_are_type_errors() -> None:
    """A string interval or jitter is a TypeError naming the argument."""
    with pytest.raises(TypeError, match="interval"):
        run_loop(lambda stop: None, "10s")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="jitter"):
        run_loop(lambda stop: None, 10, jitter="0.1")  # type: ignore[arg-type]
