"""The asyncio twins: the same rules, the job awaited on the loop, on each backend."""

from __future__ import annotations

import asyncio

import pytest
from sched_exclusive_testkit import World

from sched_exclusive import Outcome, RunError


def test_arun_runs_and_reruns(world: World) -> None:
    """arun awaits the job, then once per request queued meanwhile (by another process's twin)."""
    runs = 0
    other = world.exclusive()

    async def job() -> None:
        nonlocal runs
        runs += 1
        # sleep-ok: a real suspension point inside the job, not an ordering device
        await asyncio.sleep(0)
        if runs == 1:
            assert Outcome.QUEUED == await other.arun(job)

    async def main() -> Outcome:
        return await world.exclusive().arun(job)

    assert Outcome.RAN_QUEUED == asyncio.run(main(), debug=True)
    assert 2 == runs


def test_arun_or_skip_skips_while_busy(world: World) -> None:
    """arun_or_skip skips while another holder runs, and runs when the lock is free."""
    calls: list[str] = []

    async def job() -> None:
        calls.append("ran")

    async def main() -> tuple[Outcome, Outcome]:
        ex = world.exclusive()
        holder = world.hold()
        skipped = await ex.arun_or_skip(job)
        holder.unlock()
        return skipped, await ex.arun_or_skip(job)

    assert (Outcome.SKIPPED, Outcome.RAN) == asyncio.run(main(), debug=True)
    assert ["ran"] == calls


def test_arun_collects_job_failures(world: World) -> None:
    """A failing coroutine job gives RunError with outcome ran."""

    async def job() -> None:
        raise ValueError("nope")

    with pytest.raises(RunError) as caught:
        asyncio.run(world.exclusive().arun(job), debug=True)
    assert Outcome.RAN == caught.value.outcome
    assert world.lock_is_free()


def test_cancellation_releases_the_lock(world: World) -> None:
    """Cancelling the task mid-job releases the lock and propagates CancelledError."""
    started = asyncio.Event()

    async def job() -> None:
        started.set()
        await asyncio.Event().wait()

    async def main() -> bool:
        task = asyncio.create_task(world.exclusive().arun(job))
        await started.wait()
        assert not world.lock_is_free()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return world.lock_is_free()

    assert asyncio.run(main(), debug=True)


def test_two_tasks_coalesce(world: World) -> None:
    """Two tasks of one loop: the second queues while the first runs, and is served."""
    gate = asyncio.Event()
    running = asyncio.Event()
    runs = 0

    async def job() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            running.set()
            await gate.wait()

    async def main() -> list[Outcome]:
        ex = world.exclusive()
        first = asyncio.create_task(ex.arun(job))
        await running.wait()  # the first run holds the lock
        second = await ex.arun(job)
        gate.set()
        return [await first, second]

    assert [Outcome.RAN_QUEUED, Outcome.QUEUED] == asyncio.run(main(), debug=True)
    assert 2 == runs
