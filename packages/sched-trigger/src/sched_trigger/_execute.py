"""The opt-in executor loop: `execute`."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from ._errors import QueueClosed
from ._job import CANCELLED_REASON, Job, Outcome
from ._queue import Queue

__all__ = ["execute"]

P = TypeVar("P")

#: What `execute` runs: ``run(stop, trigger, payload) -> Outcome``, plain or ``async``.
SyncRun = Callable[[threading.Event, str, P], Outcome]
AsyncRun = Callable[[asyncio.Event, str, P], Awaitable[Outcome]]


def _panic(exc: BaseException) -> str:
    text = str(exc)
    return f"panic: {text}" if text else f"panic: {type(exc).__name__}"


def _is_async(run: object) -> bool:
    """Whether *run* is a coroutine function, or an object whose ``__call__`` is one."""
    call = type(run).__call__ if callable(run) else None
    return inspect.iscoroutinefunction(run) or inspect.iscoroutinefunction(call)


def _checked(outcome: object) -> Outcome:
    if inspect.iscoroutine(outcome):
        outcome.close()
        raise TypeError(
            "run returned a coroutine: make run itself an async def to run it on the loop"
        )
    if not isinstance(outcome, Outcome):
        raise TypeError(f"run returned {type(outcome).__name__}, not an Outcome")
    return outcome


def _cancel_all(jobs: list[Job[P]]) -> None:
    cancelled = Outcome(False, CANCELLED_REASON)
    for job in jobs:
        if not job.done:
            job.finish(cancelled)


async def execute(
    queue: Queue[P],
    run: SyncRun[P] | AsyncRun[P],
    *,
    stop: asyncio.Event,
) -> None:
    """Run the queue's jobs one at a time, in arrival order, until it is closed and drained.

    `execute` owns each job's lifecycle: it calls `Job.start`, then
    ``run(stop, trigger, payload)``, then `Job.finish` with the `Outcome`
    *run* returned, so every accepted job gets exactly one result. A plain
    function *run* executes in a worker thread, with a ``threading.Event``
    that mirrors *stop*, so the event loop (and the socket server on it) keeps
    answering meanwhile; a coroutine function runs on the loop with *stop*
    itself. Jobs received after *stop* is set are finished with
    `CANCELLED_REASON` without starting.

    If *run* raises, or `execute` itself is cancelled, the job in flight still
    gets its true result (``panic: …`` for an exception; a worker thread is
    told to stop and waited for), the queue is closed, every queued job is
    finished with `CANCELLED_REASON`, and only then does the exception
    propagate: no client ever waits on a dead executor.

    Args:
        queue: the jobs to run.
        run: ``run(stop, trigger, payload) -> Outcome``, plain or ``async``.
        stop: the graceful-shutdown signal, passed to *run* (mirrored).

    Raises:
        BaseException: whatever *run* raised (a non-`Outcome` return value is
            a ``TypeError``), or the cancellation.
    """
    is_async = _is_async(run)
    thread_stop = threading.Event()
    mirror: asyncio.Task[bool] | None = None
    pool: ThreadPoolExecutor | None = None
    if not is_async:
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sched-trigger-run")
        mirror = asyncio.create_task(stop.wait())
        mirror.add_done_callback(lambda _: thread_stop.set())
    task = asyncio.current_task()
    get = queue.get
    try:
        while True:
            try:
                job = await get()
            except QueueClosed:
                return  # closed and drained
            if stop.is_set():
                job.finish(Outcome(False, CANCELLED_REASON))
                continue
            job.start()
            began = time.monotonic()
            cancelled = False
            try:
                if is_async:
                    result = await run(stop, job.trigger, job.payload)  # type: ignore[arg-type,misc]
                else:
                    assert pool is not None
                    future, cancelled = await _in_thread(pool, run, thread_stop, job)  # type: ignore[arg-type]
                    result = future.result()
                outcome = _checked(result)
            except BaseException as exc:
                elapsed = time.monotonic() - began
                if isinstance(exc, asyncio.CancelledError):
                    job.finish(Outcome(False, CANCELLED_REASON, elapsed))
                else:
                    job.finish(Outcome(False, _panic(exc), elapsed))
                if cancelled:
                    raise asyncio.CancelledError from exc
                raise
            job.finish(outcome)
            if cancelled or (task is not None and task.cancelling()):
                # The run finished after (or swallowed) our cancellation: honour it
                # now that the job has its true result.
                raise asyncio.CancelledError
    except BaseException:
        queue.close()
        _cancel_all(queue._drain())
        raise
    finally:
        if mirror is not None:
            mirror.cancel()
        if pool is not None:
            pool.shutdown(wait=False)


async def _in_thread(
    pool: ThreadPoolExecutor,
    run: SyncRun[P],
    thread_stop: threading.Event,
    job: Job[P],
) -> tuple[Future[Outcome], bool]:
    """Run *run* in the worker and wait for it, even through a cancellation.

    Returns:
        The finished future, and whether the wait was cancelled (the worker was
        then told to stop through *thread_stop*, and waited for).
    """
    future: Future[Outcome] = pool.submit(run, thread_stop, job.trigger, job.payload)
    waiting = asyncio.wrap_future(future)
    cancelled = False
    while not waiting.done():
        try:
            await asyncio.wait((waiting,))
        except asyncio.CancelledError:
            cancelled = True
            thread_stop.set()
    return future, cancelled
