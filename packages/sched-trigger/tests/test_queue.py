"""Queue and Job: bounded FIFO, rendezvous, thread safety, exactly one result."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sched_trigger_testkit import DEADLINE, in_thread, run_async

from sched_trigger import Job, Outcome, Queue, QueueClosed, QueueFull, TriggerError


def job(n: int = 0) -> Job[int]:
    return Job("test", n)


def test_capacity_bounds_the_buffer_and_messages_travel_verbatim() -> None:
    """Beyond capacity, submit fails fast with the Go library's messages."""
    queue: Queue[int] = Queue(2)
    queue.submit(job(1))
    queue.submit(job(2))
    with pytest.raises(QueueFull) as full:
        queue.submit(job(3))
    assert "run queue is full" == str(full.value)
    assert isinstance(full.value, TriggerError)
    queue.close()
    queue.close()  # idempotent
    with pytest.raises(QueueClosed) as closed:
        queue.submit(job(4))
    assert "scheduler is shutting down" == str(closed.value)
    assert 2 == len(queue)


@pytest.mark.parametrize("capacity", [-1, -100])
def test_negative_capacity_is_a_value_error(capacity: int) -> None:
    """A negative capacity is refused: capacity 0 is a rendezvous, never unbounded."""
    with pytest.raises(ValueError, match="capacity"):
        Queue(capacity)
    with pytest.raises(TypeError):
        Queue(True)


def test_rendezvous_accepts_only_while_a_receiver_waits() -> None:
    """Capacity 0: refused while nobody waits, accepted once the receiver is idle in get()."""

    async def scenario() -> None:
        queue: Queue[int] = Queue(0)
        with pytest.raises(QueueFull):
            queue.submit(job(1))
        getter = asyncio.create_task(queue.aget())
        # sleep-ok: one zero-length yield: let get() register as waiting
        await asyncio.sleep(0)
        queue.submit(job(2))
        with pytest.raises(QueueFull):
            queue.submit(job(3))
        assert 2 == (await getter).payload

    run_async(scenario())


def test_a_waiting_receiver_takes_one_beyond_capacity_like_a_go_channel() -> None:
    """With capacity 1 and an idle receiver, one job is handed over and one more buffered."""

    async def scenario() -> None:
        queue: Queue[int] = Queue(1)
        getter = asyncio.create_task(queue.aget())
        # sleep-ok: one zero-length yield: the getter task reaches its wait (deterministic)
        await asyncio.sleep(0)
        queue.submit(job(1))
        queue.submit(job(2))
        with pytest.raises(QueueFull):
            queue.submit(job(3))
        assert 1 == (await getter).payload
        assert 2 == (await queue.aget()).payload

    run_async(scenario())


def test_async_for_drains_in_order_then_ends_on_close() -> None:
    """Iteration yields jobs in arrival order and ends once the queue is closed and drained."""

    async def scenario() -> list[int]:
        queue: Queue[int] = Queue(10)
        for n in range(5):
            queue.submit(job(n))
        queue.close()
        got = [j.payload async for j in queue]
        with pytest.raises(QueueClosed):
            await queue.aget()
        return got

    assert [0, 1, 2, 3, 4] == run_async(scenario())


def test_submit_from_threads_wakes_the_loop_in_order() -> None:
    """Many threads submitting at once: every accepted job arrives exactly once, and each
    thread's jobs arrive in the order that thread submitted them (FIFO per producer)."""

    async def scenario() -> tuple[int, list[int]]:
        queue: Queue[int] = Queue(1000)
        accepted: list[int] = []
        lock = threading.Lock()

        def producer(base: int) -> None:
            for n in range(base, base + 100):
                queue.submit(job(n))
                with lock:
                    accepted.append(n)

        threads = [threading.Thread(target=producer, args=(b,)) for b in range(0, 800, 100)]
        received: list[int] = []

        async def consume() -> None:
            async for j in queue:
                received.append(j.payload)

        consumer = asyncio.create_task(consume())
        for t in threads:
            t.start()
        for t in threads:
            await asyncio.to_thread(t.join)
        queue.close()
        await asyncio.wait_for(consumer, DEADLINE)
        return len(accepted), received

    count, received = run_async(scenario())
    assert 800 == count
    assert list(range(800)) == sorted(received)
    by_producer = {base: [n for n in received if n // 100 == base] for base in range(8)}
    assert {base: list(range(base * 100, base * 100 + 100)) for base in range(8)} == by_producer


def test_close_wakes_a_waiting_receiver() -> None:
    """A receiver blocked in get() ends when the queue is closed, from another thread too."""

    async def scenario() -> None:
        queue: Queue[int] = Queue(1)
        getter = asyncio.create_task(queue.aget())
        # sleep-ok: one zero-length yield: the getter task reaches its wait (deterministic)
        await asyncio.sleep(0)
        await asyncio.to_thread(queue.close)
        with pytest.raises(QueueClosed):
            await asyncio.wait_for(getter, DEADLINE)

    run_async(scenario())


def test_a_cancelled_receiver_never_loses_a_handed_job() -> None:
    """A job handed to a receiver that is cancelled stays in the queue for the next one."""

    async def scenario() -> None:
        queue: Queue[int] = Queue(0)
        getter = asyncio.create_task(queue.aget())
        # sleep-ok: one zero-length yield: the getter task reaches its wait (deterministic)
        await asyncio.sleep(0)
        queue.submit(job(7))
        getter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await getter
        assert 1 == len(queue)
        assert 7 == (await queue.aget()).payload

    run_async(scenario())


def submit_to_both(
    queue: Queue[int], model: list[int], n: int, *, capacity: int, closed: bool
) -> None:
    """Submit job ``n`` to the queue and to the FIFO model: refused once closed
    (QueueClosed) or at capacity (QueueFull), else queued in both."""
    if closed:
        with pytest.raises(QueueClosed):
            queue.submit(job(n))
    elif len(model) >= capacity:
        with pytest.raises(QueueFull):
            queue.submit(job(n))
    else:
        queue.submit(job(n))
        model.append(n)


@given(
    capacity=st.integers(0, 4),
    ops=st.lists(st.sampled_from(["submit", "get", "close"]), max_size=30),
)
def test_queue_matches_a_fifo_model(capacity: int, ops: list[str]) -> None:
    """Against a model: FIFO order, capacity bound, closed refuses, nothing lost."""

    async def scenario() -> None:
        queue: Queue[int] = Queue(capacity)
        model: list[int] = []
        closed = False
        n = 0
        for op in ops:
            if op == "submit":
                n += 1
                submit_to_both(queue, model, n, capacity=capacity, closed=closed)
            elif op == "get":
                if model:
                    assert model.pop(0) == (await queue.aget()).payload
                elif closed:
                    with pytest.raises(QueueClosed):
                        await queue.aget()
            else:
                queue.close()
                closed = True
        assert model == [j.payload for j in queue._drain()]

    run_async(scenario())


def test_job_lifecycle_exactly_once() -> None:
    """start and finish are once-only; the result is visible to threads and the loop."""
    j = job()
    assert (False, False, None) == (j.started, j.done, j.outcome)
    j.start()
    with pytest.raises(RuntimeError, match="already started"):
        j.start()
    j.finish(Outcome(True, "fine", 1.5))
    with pytest.raises(RuntimeError, match="already finished"):
        j.finish(Outcome(False))
    with pytest.raises(TypeError):
        j.finish("ok")  # type: ignore[arg-type]
    assert Outcome(True, "fine", timedelta(seconds=1.5)) == j.result(0)
    assert j.wait_started(0)
    assert Outcome(True, "fine", 1.5) == run_async(j.aresult())
    assert run_async(j.await_started())


def test_job_finished_without_start_reports_not_started() -> None:
    """A job cancelled before it ran: wait_started returns False; start is then refused."""
    j = job()
    j.finish(Outcome(False, "cancelled"))
    assert not j.wait_started(0)
    assert not run_async(j.await_started())
    with pytest.raises(RuntimeError, match="already finished"):
        j.start()


def test_job_waits_across_threads() -> None:
    """A thread blocked in result() and a task awaiting aresult() both wake on finish."""
    j = job()
    thread, box = in_thread(lambda: j.result(DEADLINE))

    async def scenario() -> Outcome:
        waiter = asyncio.create_task(j.aresult())
        # sleep-ok: one zero-length yield: the waiter task reaches its wait (deterministic)
        await asyncio.sleep(0)
        threading.Thread(target=j.finish, args=(Outcome(True),)).start()
        return await asyncio.wait_for(waiter, DEADLINE)

    assert Outcome(True) == run_async(scenario())
    thread.join(DEADLINE)
    assert [Outcome(True)] == box
    with pytest.raises(TimeoutError):
        job().result(0.001)
    with pytest.raises(TimeoutError):
        job().wait_started(timedelta(microseconds=1))


def test_outcome_value_type() -> None:
    """Outcome coerces durations, truncates duration_ms toward zero, is frozen and hashable."""
    assert 1234 == Outcome(True, duration=1.2349).duration_ms
    assert 0 == Outcome(True, duration=0.0009).duration_ms
    assert -1 == Outcome(True, duration=timedelta(microseconds=-1500)).duration_ms
    assert hash(Outcome(True, "a", 1)) == hash(Outcome(True, "a", timedelta(seconds=1)))
    with pytest.raises(AttributeError):
        Outcome(True).ok = False
    with pytest.raises(ValueError, match="duration"):
        Outcome(True, duration=float("nan"))
    assert "Outcome(ok=False, reason='x', duration=datetime.timedelta(0))" == repr(
        Outcome(False, "x")
    )


# --- the blocking consumer, for plain threads ---------------------------------------------


def test_get_blocks_a_thread_until_a_job_arrives() -> None:
    """A thread blocked in get() takes the job another thread submits, in FIFO order."""
    queue: Queue[int] = Queue(4)
    thread, box = in_thread(lambda: [queue.get(timeout=DEADLINE) for _ in range(3)])
    for n in (1, 2, 3):
        queue.submit(job(n))
    thread.join(DEADLINE)
    assert [[1, 2, 3]] == [[j.payload for j in box[0]]]


def test_get_returns_none_once_stop_is_set_or_the_timeout_passes() -> None:
    """get(stop=...) returns None as soon as the stop event is set (no polling: a watcher
    wakes it); get(timeout=...) returns None when nothing came in time."""
    queue: Queue[int] = Queue(1)
    stop = threading.Event()
    waiting = threading.Event()

    def consume() -> object:
        waiting.set()
        return queue.get(stop=stop)

    thread, box = in_thread(consume)
    assert waiting.wait(DEADLINE)
    stop.set()
    thread.join(DEADLINE)
    assert [None] == box
    assert queue.get(stop=stop) is None  # already set: at once
    assert queue.get(timeout=0) is None
    assert queue.get(timeout=timedelta(milliseconds=1)) is None
    queue.submit(job(5))
    got = queue.get(stop=stop)  # a job already waiting is handed over even after stop
    assert got is not None
    assert 5 == got.payload


def test_iterating_a_queue_ends_once_it_is_closed_and_drained() -> None:
    """``for job in queue`` blocks for jobs and ends when the queue is closed and empty."""
    queue: Queue[int] = Queue(4)
    thread, box = in_thread(lambda: [j.payload for j in queue])
    for n in (1, 2):
        queue.submit(job(n))
    queue.close()
    thread.join(DEADLINE)
    assert [[1, 2]] == box
    with pytest.raises(QueueClosed):
        queue.get()


def test_thread_and_asyncio_receivers_share_one_queue() -> None:
    """A blocked thread and a waiting coroutine each take one job: none is lost or doubled."""

    async def scenario() -> list[int]:
        queue: Queue[int] = Queue(0)
        thread, box = in_thread(lambda: queue.get(timeout=DEADLINE))
        getter = asyncio.create_task(queue.aget())
        accepted = 0
        n = 0
        while accepted < 2:  # capacity 0: accepted only while a receiver waits
            n += 1
            try:
                queue.submit(job(n))
            except QueueFull:
                # sleep-ok: a zero-length yield lets the consumer take a job before the next submit
                await asyncio.sleep(0)
                continue
            accepted += 1
        await asyncio.to_thread(thread.join, DEADLINE)
        taken = [box[0].payload, (await asyncio.wait_for(getter, DEADLINE)).payload]
        return sorted(taken)

    assert 2 == len(set(run_async(scenario())))


@pytest.mark.parametrize("end", ["end of the turn", "close"])
def test_a_worker_handed_a_job_without_a_wake_up_is_woken_later_never_stranded(end: str) -> None:
    """The server hands a job to a waiting worker thread without waking it while its turn
    runs (the worker would only wait for the GIL), then wakes it at the end of the turn; a
    queue closed first wakes it too: the worker takes the job either way."""
    queue: Queue[int] = Queue(0)
    thread, box = in_thread(lambda: queue.get(timeout=DEADLINE))
    while True:  # capacity 0: accepted once the worker waits
        try:
            queue._submit(job(7), True)
            break
        except QueueFull:
            time.sleep(0)  # sleep-ok: a zero-length yield until the worker reaches its wait
    assert 1 == len(queue._unwoken)  # handed over, not woken
    if end == "close":
        queue.close()
    else:
        queue._wake_deferred()
    thread.join(DEADLINE)
    assert [7] == [j.payload for j in box]
    assert [] == queue._unwoken


def test_get_on_an_event_loop_thread_is_refused() -> None:
    """Blocking get() on a loop's thread would freeze the loop: it points to aget()."""

    async def scenario() -> None:
        queue: Queue[int] = Queue(1)
        with pytest.raises(RuntimeError, match="aget"):
            queue.get()
        assert queue.get(timeout=0) is None  # never blocks: allowed

    run_async(scenario())


@given(
    capacity=st.integers(0, 4),
    ops=st.lists(st.sampled_from(["submit", "get", "close"]), max_size=30),
)
def test_the_blocking_consumer_matches_a_fifo_model(capacity: int, ops: list[str]) -> None:
    """get(timeout=0) against the model: the oldest job, None when empty, QueueClosed
    once closed and drained. Capacity 0 refuses every submit (nobody waits)."""
    queue: Queue[int] = Queue(capacity)
    model: list[int] = []
    closed = False
    for n, op in enumerate(ops):
        if op == "submit":
            submit_to_both(queue, model, n, capacity=capacity, closed=closed)
        elif op == "get":
            if model:
                got = queue.get(timeout=0)
                assert got is not None
                assert model.pop(0) == got.payload
            elif closed:
                with pytest.raises(QueueClosed):
                    queue.get(timeout=0)
            else:
                assert queue.get(timeout=0) is None
        else:
            queue.close()
            closed = True
