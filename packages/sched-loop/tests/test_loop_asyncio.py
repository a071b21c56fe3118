"""arun_loop: the asyncio twin, in synthetic and in real time; cancellation as the hard stop."""

from __future__ import annotations

import asyncio
import itertools
import random
import time

import pytest
from sched_loop_testkit import FakeTime

from sched_loop import LoopConfigError, arun_loop
from sched_loop._aio import wait_event


def test_cadence_and_drain_in_synthetic_time() -> None:
    """Startup fire at t0, then one run per interval (from each run's end); stop drains."""
    ft = FakeTime()
    starts: list[float] = []

    async def job(stop: asyncio.Event) -> None:
        starts.append(ft.now)
        await asyncio.sleep(0)  # sleep-ok: the job suspends once, as a real one does
        ft.now += 2
        if len(starts) == 3:
            stop.set()

    async def main() -> None:
        await arun_loop(
            job, 10, fire_on_start=True, stop=asyncio.Event(), clock=ft.clock, wait=ft.await_
        )

    asyncio.run(main(), debug=True)
    assert [1000.0, 1012.0, 1024.0] == starts
    assert [10.0, 10.0] == ft.waits


def test_jittered_gaps_stay_in_the_band() -> None:
    """With jitter 0.5 at 10 s, every synthetic gap lies in [5, 15) s."""
    ft = FakeTime(now=0.0)
    starts: list[float] = []

    async def job(stop: asyncio.Event) -> None:
        starts.append(ft.now)
        if len(starts) == 50:
            stop.set()

    async def main() -> None:
        await arun_loop(
            job,
            10,
            jitter=0.5,
            stop=asyncio.Event(),
            clock=ft.clock,
            wait=ft.await_,
            rng=random.Random(1),
        )

    asyncio.run(main(), debug=True)
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert 49 == len(gaps)
    assert all(5.0 - 1e-6 <= g < 15.0 + 1e-6 for g in gaps)


def test_timer_firing_as_stop_is_set_starts_no_run() -> None:
    """The tie: the wait reports a timeout while stop is being set; no new run starts."""
    ft = FakeTime()
    runs: list[float] = []
    stop_box: list[asyncio.Event] = []

    def fire_and_stop(ft: FakeTime, timeout: float) -> bool:
        ft.now += timeout
        stop_box[0].set()
        return False

    ft.on_wait = fire_and_stop

    async def job(stop: asyncio.Event) -> None:
        runs.append(ft.now)

    async def main() -> None:
        stop_box.append(asyncio.Event())
        await arun_loop(
            job, 10, fire_on_start=True, stop=stop_box[0], clock=ft.clock, wait=ft.await_
        )

    asyncio.run(main(), debug=True)
    assert [1000.0] == runs


def test_cancellation_reaches_the_job_and_propagates() -> None:
    """Cancelling the task raises CancelledError inside the job's await, then out of the loop."""
    seen: list[str] = []

    async def job(stop: asyncio.Event) -> None:
        seen.append("started")
        try:
            await asyncio.Event().wait()  # a run that would never end by itself
        except asyncio.CancelledError:
            seen.append("cancelled in job")
            raise

    async def main() -> None:
        task = asyncio.create_task(arun_loop(job, 3600, fire_on_start=True))
        while not seen:
            # sleep-ok: a zero-length yield to the loop until the job records its step
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()

    asyncio.run(main(), debug=True)
    assert ["started", "cancelled in job"] == seen


def test_cancellation_during_the_wait_ends_the_loop_at_once() -> None:
    """Cancelling while the loop sleeps between runs ends it without another run."""
    runs: list[int] = []

    async def job(stop: asyncio.Event) -> None:
        runs.append(1)

    async def main() -> float:
        task = asyncio.create_task(arun_loop(job, 3600, fire_on_start=True))
        while not runs:
            # sleep-ok: a zero-length yield to the loop until the job records its step
            await asyncio.sleep(0)
        # sleep-ok: a zero-length yield: let the loop enter its one-hour wait
        await asyncio.sleep(0)
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - started

    elapsed = asyncio.run(main(), debug=True)
    assert [1] == runs
    assert elapsed < 10.0


def test_graceful_stop_in_real_time_drains_the_run() -> None:
    """Setting stop during a real run lets the run finish; the loop then returns."""
    events: list[str] = []

    async def main() -> None:
        stop = asyncio.Event()
        release = asyncio.Event()

        async def job(stop: asyncio.Event) -> None:
            events.append("start")
            await release.wait()
            events.append("end")

        task = asyncio.create_task(arun_loop(job, 0.01, fire_on_start=True, stop=stop))
        while not events:
            # sleep-ok: a zero-length yield to the loop until the job records its step
            await asyncio.sleep(0)
        stop.set()
        release.set()
        await asyncio.wait_for(task, 30)

    asyncio.run(main(), debug=True)
    assert ["start", "end"] == events


def test_real_time_cadence_with_generous_bounds() -> None:
    """Five runs at a 20 ms interval take at least 80 ms and (generously) under 10 s."""
    starts: list[float] = []

    async def job(stop: asyncio.Event) -> None:
        starts.append(time.monotonic())
        if len(starts) == 5:
            stop.set()

    async def main() -> None:
        await arun_loop(job, 0.02, fire_on_start=True, stop=asyncio.Event())

    asyncio.run(main(), debug=True)
    assert 5 == len(starts)
    assert 0.08 - 0.005 <= starts[-1] - starts[0] < 10.0


def test_default_wait_reports_the_event() -> None:
    """The default wait returns True for a set event at once and False on a timeout."""

    async def main() -> tuple[bool, bool]:
        done = asyncio.Event()
        done.set()
        return await wait_event(done, 3600), await wait_event(asyncio.Event(), 0.001)

    assert (True, False) == asyncio.run(main(), debug=True)


def test_bad_configuration_raises_before_any_run() -> None:
    """A non-positive interval or a jitter of 1 raises LoopConfigError when awaited."""
    ran: list[int] = []

    async def job(stop: asyncio.Event) -> None:
        ran.append(1)

    async def main() -> None:
        with pytest.raises(LoopConfigError, match="interval"):
            await arun_loop(job, 0, fire_on_start=True)
        with pytest.raises(LoopConfigError, match="jitter"):
            await arun_loop(job, 1, jitter=1.0, fire_on_start=True)

    asyncio.run(main(), debug=True)
    assert [] == ran


def test_job_exception_propagates() -> None:
    """An async job's exception leaves arun_loop unchanged."""

    async def job(stop: asyncio.Event) -> None:
        raise KeyError("boom")

    async def main() -> None:
        await arun_loop(job, 1, fire_on_start=True)

    with pytest.raises(KeyError, match="boom"):
        asyncio.run(main(), debug=True)


def test_stop_during_the_wait_returns_without_a_run() -> None:
    """Setting stop from another task during the one-hour wait ends the loop, no new run."""
    runs: list[int] = []

    async def job(stop: asyncio.Event) -> None:
        runs.append(1)

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(arun_loop(job, 3600, fire_on_start=True, stop=stop))
        while not runs:
            # sleep-ok: a zero-length yield to the loop until the job records its step
            await asyncio.sleep(0)
        stop.set()
        await asyncio.wait_for(task, 30)

    asyncio.run(main(), debug=True)
    assert [1] == runs
