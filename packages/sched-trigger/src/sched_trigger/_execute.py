"""The opt-in executor loop: `execute`, and the worker thread that runs plain functions."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Generic, TypeVar, final

from ._errors import QueueClosed
from ._job import CANCELLED_REASON, Job, Outcome
from ._queue import Queue, _Dispatcher, _Waiter

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
    on the loop with *stop* itself; from Python 3.12 each run has a task of
    its own, started eagerly: when the server hands an idle executor a
    request's job, the run begins within the server's handling of the
    request (on 3.11 the runs take turns in this task). The runs share one
    context, this task's (a copy of it from 3.12). Jobs received after
    *stop* is set are finished with `CANCELLED_REASON` without starting.

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
    if _EAGER_TASKS:
        await _dispatched(queue, run, stop)  # type: ignore[arg-type]
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


#: Python 3.12's tasks can start at once, within the call that makes them (``eager_start``).
_EAGER_TASKS = sys.version_info >= (3, 12)


def _eager_task(
    coro: Awaitable[object],
    loop: asyncio.AbstractEventLoop,
    context: contextvars.Context,
) -> asyncio.Task[object]:
    """A task of *coro* on *loop*, started at once (its first step runs in this call)."""
    if sys.version_info >= (3, 12):
        return asyncio.Task(coro, loop=loop, context=context, eager_start=True)  # type: ignore[arg-type]
    raise RuntimeError("eager tasks need Python 3.12")  # pragma: no cover  # (see _EAGER_TASKS)


async def _dispatched(queue: Queue[P], run: AsyncRun[P], stop: asyncio.Event) -> None:
    """`execute` for a coroutine *run* (Python 3.12+): each job runs in a task of its own.

    The job's task starts eagerly, in the call that hands the job over: when
    the server hands an idle executor a request's job, the run begins (and a
    run that never waits ends, its ``done`` line written) within the server's
    handling of the request, without a turn of the loop in between, where a
    task woken through a future costs a loop callback and a task step. The
    runs share one context, a copy of this task's, as they shared this task's.
    """
    runner = _Runner(queue, run, stop, asyncio.get_running_loop())
    try:
        runner.take()
        try:
            error = await runner.ended
        except asyncio.CancelledError:
            await runner.cancel()
            raise
        if error is not None:
            raise error
    except BaseException:
        queue.close()
        _cancel_all(queue._drain())
        raise


@final
class _Runner(Generic[P]):
    """The state of `_dispatched`: the queue's receiver, and the run in flight."""

    __slots__ = (
        "began",
        "busy",
        "context",
        "ended",
        "job",
        "loop",
        "queue",
        "receiver",
        "run",
        "stop",
        "task",
    )

    def __init__(
        self,
        queue: Queue[P],
        run: AsyncRun[P],
        stop: asyncio.Event,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.queue = queue
        self.run = run
        self.stop = stop
        self.loop = loop
        # Set (to the error that ends execute, or None) once execute must return.
        self.ended: asyncio.Future[BaseException | None] = loop.create_future()
        self.context = contextvars.copy_context()
        self.receiver = _Dispatcher(loop, self.take)
        self.busy = False
        # A run that waits, while it waits: its task, its job, when it began.
        self.task: asyncio.Task[object] | None = None
        self.job: Job[P] | None = None
        self.began = 0.0

    def take(self) -> None:
        """Run the queued jobs one at a time until a run waits or none is left (then enlist)."""
        if self.busy or self.ended.done():
            return  # the end of the run in flight takes the next job; or execute is over
        queue: Queue[P] = self.queue  # ours (the private-attribute linter reads this)
        stop = self.stop
        while True:
            try:
                job = queue._next_for(self.receiver)
            except QueueClosed:
                self._end(None)  # closed and drained
                return
            if job is None:
                return  # enlisted: a submit wakes us
            if stop.is_set():
                job.finish(Outcome(False, CANCELLED_REASON))
                continue
            self.busy = True
            job.start()
            began = time.monotonic()
            try:
                task = _eager_task(
                    self.run(stop, job.trigger, job.payload), self.loop, self.context
                )
            except BaseException as exc:  # the call raised, or its first step (KeyboardInterrupt)
                self.busy = False
                job.finish(Outcome(False, _panic(exc), time.monotonic() - began))
                self._end(exc)
                if isinstance(exc, Exception):
                    return
                raise
            if not task.done():
                self.task, self.job, self.began = task, job, began
                task.add_done_callback(self.finished)
                return
            self.busy = False
            if not self._settle(job, began, task):
                return
            del job, task  # let go: see run_jobs

    def finished(self, task: asyncio.Task[object]) -> None:
        """A run that waited is over: its job's result, then the next job."""
        job, began = self.job, self.began
        self.task = self.job = None
        self.busy = False
        assert job is not None
        if self._settle(job, began, task):
            del job, task
            self.take()

    def _settle(self, job: Job[P], began: float, task: asyncio.Task[object]) -> bool:
        """Finish *job* with what its run's *task* gave; False if that ends execute."""
        if task.cancelled():
            job.finish(Outcome(False, CANCELLED_REASON, time.monotonic() - began))
            self._end(asyncio.CancelledError())  # (execute's own cancellation, or the run's)
            return False
        error = task.exception()
        if error is None:
            returned = task.result()
            if returned.__class__ is Outcome:
                job.finish(returned)
                return True
            try:
                job.finish(_checked(returned))
            except TypeError as exc:
                error = exc
            else:
                return True
        job.finish(Outcome(False, _panic(error), time.monotonic() - began))
        self._end(error)
        return False

    def _end(self, error: BaseException | None) -> None:
        if not self.ended.done():
            self.ended.set_result(error)

    async def cancel(self) -> None:
        """execute is cancelled: take no more jobs; cancel the run in flight and wait for it."""
        self.queue._abandon(self.receiver)
        task = self.task
        if task is None:
            return
        task.cancel()
        while not task.done():
            try:
                await asyncio.wait((task,))
            except asyncio.CancelledError:
                task.cancel()  # cancelled again: pass it on, and still wait for the result
