"""The asyncio twins: the same rules, the job awaited on the loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sched_exclusive import Exclusive, Outcome, RunError
from sched_lock import try_lock


def lock_is_free(directory: Path) -> bool:
    lock = try_lock(directory / "cycle.lock")
    if lock is None:
        return False
    lock.unlock()
    return True


def test_arun_runs_and_reruns(tmp_path: Path) -> None:
    """arun awaits the job, then once per request queued meanwhile (by another process's twin)."""
    runs = 0
    other = Exclusive(tmp_path)

    async def job() -> None:
        nonlocal runs
        runs += 1
        # sleep-ok: a real suspension point inside the job, not an ordering device
        await asyncio.sleep(0)
        if runs == 1:
            assert Outcome.QUEUED == await other.arun(job)

    async def main() -> Outcome:
        return await Exclusive(tmp_path).arun(job)

    assert Outcome.RAN_QUEUED == asyncio.run(main(), debug=True)
    assert 2 == runs


def test_arun_or_skip_skips_while_busy(tmp_path: Path) -> None:
    """arun_or_skip skips while another holder runs, and runs when the lock is free."""
    calls: list[str] = []

    async def job() -> None:
        calls.append("ran")

    async def main() -> tuple[Outcome, Outcome]:
        ex = Exclusive(tmp_path)
        holder = try_lock(ex.lock_path)
        assert holder is not None
        skipped = await ex.arun_or_skip(job)
        holder.unlock()
        return skipped, await ex.arun_or_skip(job)

    assert (Outcome.SKIPPED, Outcome.RAN) == asyncio.run(main(), debug=True)
    assert ["ran"] == calls


def test_arun_collects_job_failures(tmp_path: Path) -> None:
    """A failing coroutine job gives RunError with outcome ran."""

    async def job() -> None:
        raise ValueError("nope")

    with pytest.raises(RunError) as caught:
        asyncio.run(Exclusive(tmp_path).arun(job), debug=True)
    assert Outcome.RAN == caught.value.outcome
    assert lock_is_free(tmp_path)


def test_cancellation_releases_the_lock(tmp_path: Path) -> None:
    """Cancelling the task mid-job releases the lock and propagates CancelledError."""
    started = asyncio.Event()

    async def job() -> None:
        started.set()
        await asyncio.Event().wait()

    async def main() -> bool:
        task = asyncio.create_task(Exclusive(tmp_path).arun(job))
        await started.wait()
        assert not lock_is_free(tmp_path)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return lock_is_free(tmp_path)

    assert asyncio.run(main(), debug=True)


def test_two_tasks_coalesce(tmp_path: Path) -> None:
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
        ex = Exclusive(tmp_path)
        first = asyncio.create_task(ex.arun(job))
        await running.wait()  # the first run holds the lock
        second = await ex.arun(job)
        gate.set()
        return [await first, second]

    assert [Outcome.RAN_QUEUED, Outcome.QUEUED] == asyncio.run(main(), debug=True)
    assert 2 == runs
