"""execute: one job at a time, in order; every job gets exactly one result, whatever happens."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading

import pytest
from sched_trigger_testkit import DEADLINE, run_async

from sched_trigger import CANCELLED_REASON, Job, Outcome, Queue, execute


def jobs(queue: Queue[int], n: int) -> list[Job[int]]:
    made = [Job("test", i) for i in range(n)]
    for j in made:
        queue.submit(j)
    return made


def test_runs_in_arrival_order_one_at_a_time_then_returns_when_drained() -> None:
    """Jobs run sequentially in FIFO order; execute returns once closed and drained."""
    order: list[int] = []
    running = 0

    async def run(stop: asyncio.Event, trigger: str, payload: int) -> Outcome:
        nonlocal running
        running += 1
        assert 1 == running
        order.append(payload)
        # sleep-ok: the job suspends once, as a real one does
        await asyncio.sleep(0)
        running -= 1
        return Outcome(payload % 2 == 0, f"n={payload}")

    async def scenario() -> list[Job[int]]:
        queue: Queue[int] = Queue(10)
        made = jobs(queue, 6)
        queue.close()
        await asyncio.wait_for(execute(queue, run, stop=asyncio.Event()), DEADLINE)
        return made

    made = run_async(scenario())
    assert list(range(6)) == order
    assert [Outcome(i % 2 == 0, f"n={i}") for i in range(6)] == [j.result(0) for j in made]
    assert all(j.started for j in made)


def test_a_plain_run_executes_in_a_worker_thread_with_a_mirrored_stop() -> None:
    """A sync run runs off the loop thread; setting the asyncio stop sets its threading.Event."""
    seen: list[tuple[bool, bool]] = []

    def run(stop: threading.Event, trigger: str, payload: int) -> Outcome:
        seen.append((threading.current_thread() is threading.main_thread(), stop.is_set()))
        assert stop.wait(DEADLINE)
        return Outcome(True, "saw stop")

    async def scenario() -> Job[int]:
        queue: Queue[int] = Queue(1)
        (j,) = jobs(queue, 1)
        stop = asyncio.Event()
        executor = asyncio.create_task(execute(queue, run, stop=stop))
        assert await asyncio.wait_for(j.await_started(), DEADLINE)
        stop.set()
        queue.close()
        await asyncio.wait_for(executor, DEADLINE)
        return j

    j = run_async(scenario())
    assert [(False, False)] == seen
    assert Outcome(True, "saw stop") == j.result(0)


def test_jobs_received_after_stop_are_cancelled_without_starting() -> None:
    """Once stop is set, remaining jobs get CANCELLED_REASON and never start."""

    async def scenario() -> list[Job[int]]:
        queue: Queue[int] = Queue(5)
        made = jobs(queue, 3)
        stop = asyncio.Event()
        stop.set()
        queue.close()
        await execute(queue, lambda s, t, p: Outcome(True), stop=stop)
        return made

    made = run_async(scenario())
    assert [Outcome(False, CANCELLED_REASON)] * 3 == [j.result(0) for j in made]
    assert not any(j.started for j in made)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_raising_run_delivers_every_result_before_propagating(kind: str) -> None:
    """The job in flight gets 'panic: ...', the queue closes, the rest are cancelled, then raise."""

    def sync_run(stop: threading.Event, trigger: str, payload: int) -> Outcome:
        if payload == 1:
            raise ValueError("boom")
        return Outcome(True)

    async def async_run(stop: asyncio.Event, trigger: str, payload: int) -> Outcome:
        return sync_run(threading.Event(), trigger, payload)

    async def scenario() -> list[Job[int]]:
        queue: Queue[int] = Queue(5)
        made = jobs(queue, 4)
        run = sync_run if kind == "sync" else async_run
        with pytest.raises(ValueError, match="boom"):
            await asyncio.wait_for(execute(queue, run, stop=asyncio.Event()), DEADLINE)
        assert queue.closed
        return made

    made = run_async(scenario())
    outcomes = [j.result(0) for j in made]
    assert Outcome(True) == outcomes[0]
    assert (False, "panic: boom") == (outcomes[1].ok, outcomes[1].reason)
    assert [Outcome(False, CANCELLED_REASON)] * 2 == outcomes[2:]


def test_a_run_returning_something_else_is_a_panic() -> None:
    """A run must return an Outcome; anything else is a TypeError delivered as a panic."""

    async def scenario() -> Job[int]:
        queue: Queue[int] = Queue(1)
        (j,) = jobs(queue, 1)
        with pytest.raises(TypeError, match="not an Outcome"):
            await execute(queue, lambda s, t, p: True, stop=asyncio.Event())  # type: ignore[arg-type]
        return j

    outcome = run_async(scenario()).result(0)
    assert "panic: run returned bool, not an Outcome" == outcome.reason


def test_cancelling_execute_with_a_thread_run_waits_for_its_true_result() -> None:
    """Cancelled mid-run: the worker is told to stop, its outcome delivered; the rest cancelled."""

    def run(stop: threading.Event, trigger: str, payload: int) -> Outcome:
        assert stop.wait(DEADLINE)
        return Outcome(True, "finished after stop")

    async def scenario() -> list[Job[int]]:
        queue: Queue[int] = Queue(5)
        made = jobs(queue, 3)
        executor = asyncio.create_task(execute(queue, run, stop=asyncio.Event()))
        assert await asyncio.wait_for(made[0].await_started(), DEADLINE)
        executor.cancel()
        with pytest.raises(asyncio.CancelledError):
            await executor
        assert queue.closed
        return made

    made = run_async(scenario())
    assert Outcome(True, "finished after stop") == made[0].result(0)
    assert [Outcome(False, CANCELLED_REASON)] * 2 == [j.result(0) for j in made[1:]]


def test_cancelling_execute_with_a_coroutine_run() -> None:
    """Cancelled mid-run: the coroutine is cancelled, its job and the queued ones get a result."""
    started = asyncio.Event()

    async def run(stop: asyncio.Event, trigger: str, payload: int) -> Outcome:
        started.set()
        # sleep-ok: a run that never ends on its own; the test cancels it
        await asyncio.sleep(3600)
        return Outcome(True)  # pragma: no cover

    async def scenario() -> list[Job[int]]:
        queue: Queue[int] = Queue(5)
        made = jobs(queue, 2)
        executor = asyncio.create_task(execute(queue, run, stop=asyncio.Event()))
        await asyncio.wait_for(started.wait(), DEADLINE)
        executor.cancel()
        with pytest.raises(asyncio.CancelledError):
            await executor
        return made

    made = run_async(scenario())
    first = made[0].result(0)
    assert (False, CANCELLED_REASON) == (first.ok, first.reason)
    assert Outcome(False, CANCELLED_REASON) == made[1].result(0)


def test_cancelling_an_idle_executor_closes_the_queue() -> None:
    """Cancelled while waiting for work: the queue closes and later submits are refused."""

    async def scenario() -> Queue[int]:
        queue: Queue[int] = Queue(1)
        executor = asyncio.create_task(
            execute(queue, lambda s, t, p: Outcome(True), stop=asyncio.Event())
        )
        # sleep-ok: one zero-length yield: the executor task reaches its first await
        await asyncio.sleep(0)
        executor.cancel()
        with pytest.raises(asyncio.CancelledError):
            await executor
        return queue

    assert run_async(scenario()).closed


def test_a_hand_written_executor_loop_over_async_for() -> None:
    """The ~7-line loop the spec describes works on the public Queue/Job API."""

    async def scenario() -> list[Outcome]:
        queue: Queue[str] = Queue(4)
        made = [Job("ticker", s) for s in ("a", "b", "c")]
        for j in made:
            queue.submit(j)
        queue.close()
        async for j in queue:
            if j.payload == "b":
                j.finish(Outcome(False, "halted by app policy"))
                continue
            j.start()
            j.finish(Outcome(True, f"ran {j.payload}"))
        return [await j.aresult() for j in made]

    assert [
        Outcome(True, "ran a"),
        Outcome(False, "halted by app policy"),
        Outcome(True, "ran c"),
    ] == run_async(scenario())


def test_a_raising_sync_run_leaves_no_asyncio_noise(caplog: pytest.LogCaptureFixture) -> None:
    """A sync run that raises is reported once (by execute raising), with no second
    'Future exception was never retrieved' traceback from asyncio."""
    import gc

    def run(stop: threading.Event, trigger: str, payload: int) -> Outcome:
        raise ValueError("boom")

    async def scenario() -> None:
        queue: Queue[int] = Queue(2)
        jobs(queue, 1)
        with pytest.raises(ValueError, match="boom"):
            await asyncio.wait_for(execute(queue, run, stop=asyncio.Event()), DEADLINE)
        gc.collect()
        # sleep-ok: one zero-length yield: callbacks the collection scheduled run
        await asyncio.sleep(0)

    caplog.set_level(logging.ERROR, logger="asyncio")
    run_async(scenario())
    gc.collect()
    assert [] == [r.getMessage() for r in caplog.records if r.name == "asyncio"]


def test_a_sync_run_sees_stop_before_each_job_without_a_loop_round_trip() -> None:
    """The worker checks the stop signal itself before starting each job: a job queued
    behind a run that set the stop is cancelled, never started."""

    async def scenario() -> list[Job[int]]:
        queue: Queue[int] = Queue(5)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def run(thread_stop: threading.Event, trigger: str, payload: int) -> Outcome:
            loop.call_soon_threadsafe(stop.set)
            assert thread_stop.wait(DEADLINE)
            return Outcome(True, "saw stop")

        made = jobs(queue, 3)
        queue.close()
        await asyncio.wait_for(execute(queue, run, stop=stop), DEADLINE)
        return made

    made = run_async(scenario())
    assert Outcome(True, "saw stop") == made[0].result(0)
    assert [Outcome(False, CANCELLED_REASON)] * 2 == [j.result(0) for j in made[1:]]
    assert not made[1].started


def test_coroutine_runs_share_the_executor_context() -> None:
    """Every coroutine run sees the context execute was started in, and what one run
    sets there the next one sees: the runs take turns in execute's own task."""
    seen: list[int] = []

    async def run(stop: asyncio.Event, trigger: str, payload: int) -> Outcome:
        seen.append(COUNTER.get())
        COUNTER.set(COUNTER.get() + 1)
        return Outcome(True)

    async def scenario() -> None:
        queue: Queue[int] = Queue(4)
        jobs(queue, 3)
        queue.close()
        COUNTER.set(10)
        await asyncio.wait_for(execute(queue, run, stop=asyncio.Event()), DEADLINE)

    run_async(scenario())
    assert [10, 11, 12] == seen


COUNTER: contextvars.ContextVar[int] = contextvars.ContextVar("COUNTER")
