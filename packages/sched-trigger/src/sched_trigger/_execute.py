"""The opt-in executor loop: `execute`, and the worker thread that runs plain functions."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

from ._errors import QueueClosed
from ._job import CANCELLED_REASON, Job, Outcome
from ._queue import Queue, _Waiter

__all__ = ["Executor", "execute", "in_worker", "run_jobs"]

P = TypeVar("P")

#: What `execute` runs: ``run(stop, trigger, payload) -> Outcome``, plain or ``async``.
SyncRun = Callable[[threading.Event, str, P], Outcome]
AsyncRun = Callable[[asyncio.Event, str, P], Awaitable[Outcome]]
#: A hand-written executor for `run_broker_in_thread`: ``executor(queue, stop)``.
Executor = Callable[[Queue[P], threading.Event], object]


def _panic(exc: BaseException) -> str:
    text = str(exc)
    return f"panic: {text}" if text else f"panic: {type(exc).__name__}"


def is_async(run: object) -> bool:
    """Whether *run* is a coroutine function, or an object whose ``__call__`` is one."""
    call = type(run).__call__ if callable(run) else None
    return inspect.iscoroutinefunction(run) or inspect.iscoroutinefunction(call)


def _checked(outcome: object) -> Outcome:
    """*outcome* if it is an `Outcome` (the callers check the common case first)."""
    if inspect.iscoroutine(outcome):
        outcome.close()
        raise TypeError(
            "run returned a coroutine: make run itself an async def to run it on the loop"
        )
    if not isinstance(outcome, Outcome):
        raise TypeError(f"run returned {type(outcome).__name__}, not an Outcome")
    return outcome


def _cancel_all(jobs: list[Job[P]], reason: str = CANCELLED_REASON) -> None:
    cancelled = Outcome(False, reason)
    for job in jobs:
        if not job.done:
            with contextlib.suppress(RuntimeError):  # finished meanwhile by its holder
                job.finish(cancelled)


def run_jobs(queue: Queue[P], stop: threading.Event, *, run: SyncRun[P]) -> None:
    """The executor loop for a plain-function *run*, on the calling (worker) thread.

    Jobs taken once *stop* is set are finished with `CANCELLED_REASON` without
    starting; a job whose run raises is finished with ``panic: …`` and the
    exception propagates.
    """
    jobs = iter(queue)
    while (job := next(jobs, None)) is not None:
        if stop.is_set():
            job.finish(Outcome(False, CANCELLED_REASON))
            continue
        job.start()
        began = time.monotonic()
        try:
            returned: object = run(stop, job.trigger, job.payload)
            outcome = returned if returned.__class__ is Outcome else _checked(returned)
        except BaseException as exc:
            job.finish(Outcome(False, _panic(exc), time.monotonic() - began))
            raise
        job.finish(outcome)
        # Let go of it before waiting for the next one: the server frees a large
        # payload a slice at a time on its loop, once nothing else holds it.
        del job, outcome


def _work(queue: Queue[P], executor: Executor[P], stop: threading.Event, *, track: bool) -> None:
    """Run *executor* to its end, then give every job it left behind exactly one result."""
    taken = queue._track_taken() if track else []
    reason = CANCELLED_REASON
    try:
        executor(queue, stop)
    except BaseException as exc:
        reason = _panic(exc)
        raise
    finally:
        queue.close()
        _cancel_all(queue._drain())
        # Jobs the executor took and never finished: a run that raised, or was abandoned.
        _cancel_all(list(taken), reason)


async def in_worker(
    queue: Queue[P],
    executor: Executor[P],
    stop: threading.Event,
    *,
    track: bool = False,
    started: Callable[[threading.Thread], object] | None = None,
) -> None:
    """Run *executor* on a worker thread and wait for it, even through a cancellation.

    When it ends, for any reason, the queue is closed and every job still
    queued (and, with *track*, every job it took and left unfinished) gets its
    one result. A cancellation sets *stop* and closes the queue, waits for the
    executor to finish, then propagates.

    Raises:
        BaseException: whatever the executor raised, or the cancellation.
    """
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[BaseException | None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if not ended.done():
            ended.set_result(error)

    def target() -> None:
        error: BaseException | None = None
        try:
            _work(queue, executor, stop, track=track)
        except BaseException as exc:
            error = exc
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting
            loop.call_soon_threadsafe(settle, error)

    thread = threading.Thread(target=target, name="sched-trigger-run", daemon=True)
    if started is not None:
        started(thread)  # before it runs: a run may ask whether it is on this thread
    thread.start()
    cancelled = False
    while not ended.done():
        try:
            await asyncio.wait((ended,))
        except asyncio.CancelledError:
            cancelled = True
            stop.set()
            queue.close()
    error = ended.result()
    if error is not None:
        if cancelled:
            raise asyncio.CancelledError from error
        raise error
    if cancelled:
        raise asyncio.CancelledError


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
    function *run* executes on a worker thread, with a ``threading.Event``
    that mirrors *stop*, so the event loop (and the socket server on it) keeps
    answering meanwhile; the worker takes the jobs from the queue itself, so a
    run costs no round trip through the event loop. A coroutine function runs
    on the loop with *stop* itself. Jobs received after *stop* is set are
    finished with `CANCELLED_REASON` without starting.

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
    if not is_async(run):
        thread_stop = threading.Event()
        if stop.is_set():
            thread_stop.set()
        mirror = asyncio.create_task(stop.wait())
        mirror.add_done_callback(lambda _: thread_stop.set())
        try:
            await in_worker(queue, partial(run_jobs, run=run), thread_stop)  # type: ignore[arg-type]
        finally:
            mirror.cancel()
        return
    task = asyncio.current_task()
    waiter = _Waiter(asyncio.get_running_loop())  # one for every wait: `Queue.aget`, unrolled
    try:
        while True:
            try:
                job = queue._take_or_enlist(waiter)
            except QueueClosed:
                return  # closed and drained
            if job is None:
                try:
                    await waiter.future
                except BaseException:
                    queue._abandon(waiter)
                    raise
                job = queue._woken(waiter)
                if job is None:
                    continue
            if stop.is_set():
                job.finish(Outcome(False, CANCELLED_REASON))
                continue
            job.start()
            began = time.monotonic()
            try:
                returned: object = await run(stop, job.trigger, job.payload)  # type: ignore[arg-type,misc]
                outcome = returned if returned.__class__ is Outcome else _checked(returned)
            except BaseException as exc:
                elapsed = time.monotonic() - began
                if isinstance(exc, asyncio.CancelledError):
                    job.finish(Outcome(False, CANCELLED_REASON, elapsed))
                else:
                    job.finish(Outcome(False, _panic(exc), elapsed))
                raise
            job.finish(outcome)
            del job, outcome  # let go before waiting: see run_jobs
            if task is not None and task.cancelling():
                # The run finished after (or swallowed) our cancellation: honour it
                # now that the job has its true result.
                raise asyncio.CancelledError
    except BaseException:
        queue.close()
        _cancel_all(queue._drain())
        raise
