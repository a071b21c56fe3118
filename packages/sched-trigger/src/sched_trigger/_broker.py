"""The whole broker in a background thread, for daemons written without asyncio."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
from collections.abc import Callable, Coroutine
from functools import partial
from types import TracebackType
from typing import Any, Generic, TypeVar, final

from ._durations import Duration
from ._execute import AsyncRun, Executor, SyncRun, execute, in_worker, is_async, run_jobs
from ._job import Job
from ._listen import listen
from ._queue import Queue
from ._server import Server
from ._stopwatch import subscribe

__all__ = ["BrokerThread", "run_broker_in_thread"]

P = TypeVar("P")


@final
class BrokerThread(Generic[P]):
    """A running broker (socket server and executor) on its own event loop thread.

    Made by `run_broker_in_thread`. Submit the daemon's own runs (a ticker) with
    `submit` or straight to `queue` from any thread; `stop` shuts down in the
    documented order and joins the thread. Closing `queue` also ends the broker
    once the executor drained it. Usable as a context manager.

    Attributes:
        queue: the broker's queue; submit to it from any thread.
        path: the socket path.
        stop_event: the daemon's stop event: the app's own if it passed
            ``stop=``; the broker sets it when it ends, for any reason.
    """

    def __init__(self, queue: Queue[P], path: str, stop: threading.Event) -> None:
        self.queue = queue
        self.path = path
        self.stop_event = stop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._astop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._workers: list[threading.Thread] = []

    def submit(self, payload: P, trigger: str = "ticker") -> Job[P]:
        """Queue a run of the daemon's own (a tick), without a socket round trip.

        Args:
            payload: the run's arguments.
            trigger: the job's trigger name.

        Returns:
            The job: ``job.result()`` blocks until its outcome.

        Raises:
            QueueFull, QueueClosed: as `Queue.submit`.
        """
        job: Job[P] = Job(trigger, payload)
        self.queue.submit(job)
        return job

    def stop(self, timeout: Duration | None = None) -> None:
        """Shut down and join: stop accepting, close the queue, let the executor drain, wait.

        The stop signal is set, so the run in flight is asked to stop and jobs
        still queued are finished with `CANCELLED_REASON`. Idempotent. Called
        from inside a run (or anything else on the broker's own threads), it
        requests the stop and returns at once: waiting there would wait for
        itself.

        Args:
            timeout: bound on the join; ``None`` waits for the drain.

        Raises:
            TimeoutError: the thread did not finish in time.
            BaseException: whatever ended the broker abnormally (a ``run`` that raised).
        """
        self.stop_event.set()
        self._wake_loop()
        if not self._inside():
            self.join(timeout)

    def join(self, timeout: Duration | None = None) -> None:
        """Wait for the broker thread to end (after `stop`, or after its executor ended).

        Args:
            timeout: bound on the join; ``None`` waits as long as it takes.

        Raises:
            TimeoutError: the thread did not finish in time.
            RuntimeError: called from inside a run (it would wait for itself).
            BaseException: whatever ended the broker abnormally (a ``run`` that raised).
        """
        if self._inside():
            raise RuntimeError(
                "join() called from inside the broker's own run would wait for itself; "
                "call stop() there, which requests the stop and returns"
            )
        thread = self._thread
        if thread is not None:
            if timeout is None:
                thread.join()
            else:
                from ._durations import to_seconds

                thread.join(to_seconds(timeout, name="timeout"))
            if thread.is_alive():
                raise TimeoutError("the broker thread did not stop in time")
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    @property
    def running(self) -> bool:
        """Whether the broker thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> BrokerThread[P]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _inside(self) -> bool:
        current = threading.current_thread()
        return current is self._thread or current in self._workers

    def _wake_loop(self) -> None:
        loop, astop = self._loop, self._astop
        if loop is not None and astop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nothing to wake
                loop.call_soon_threadsafe(astop.set)

    async def _main(
        self,
        server: Server[P],
        sock: socket.socket,
        work: Callable[[asyncio.Event], Coroutine[Any, Any, None]],
    ) -> None:
        self._loop = asyncio.get_running_loop()
        astop = self._astop = asyncio.Event()
        unsubscribe = subscribe(self.stop_event, self._wake_loop)
        executor = asyncio.create_task(work(astop))
        serving = asyncio.create_task(server.serve(sock))
        self._ready.set()
        stopping = asyncio.create_task(astop.wait())
        try:
            await asyncio.wait((executor, stopping), return_when=asyncio.FIRST_COMPLETED)
        finally:
            unsubscribe()
            server.close()
            self.queue.close()
            astop.set()
            self.stop_event.set()
            try:
                await executor
            finally:
                await serving
                await server.wait()
                stopping.cancel()


def run_broker_in_thread(
    path: str | os.PathLike[str],
    run: SyncRun[P] | AsyncRun[P] | None = None,
    *,
    executor: Executor[P] | None = None,
    capacity: int = 16,
    stop: threading.Event | None = None,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
    **server_options: Any,
) -> BrokerThread[P]:
    """Run the whole broker (queue, socket server, executor) on a background thread.

    For a daemon written without asyncio: the socket is created here (so
    `AlreadyServing` and friends raise in the caller), then a daemon thread
    runs an event loop with `Server` and the executor. ``run(stop, trigger,
    payload)`` is called as `execute` calls it (a plain function on a worker
    thread with a ``threading.Event``). Opt into uvloop with
    ``loop_factory=uvloop.new_event_loop``; the library never swaps the loop by
    itself.

    A daemon with its own executor policy (halting admission after a failure,
    its own cancellation reasons) passes *executor* instead of *run*:
    ``executor(queue, stop)`` is called on a worker thread and takes jobs with
    ``for job in queue`` or `Queue.get`, starting and finishing each one it
    takes. When it returns or raises, the broker ends: every job still queued
    is finished with `CANCELLED_REASON`, and every job it took but did not
    finish with ``panic: …`` (it raised) or `CANCELLED_REASON`.

    With *stop*, the daemon's one stop event is shared both ways: setting it
    shuts the broker down (as `BrokerThread.stop` does, without waiting), and
    the broker sets it when it ends for any reason (a ``run`` that raised
    included), so a main thread waiting on it learns that the broker died;
    `BrokerThread.join` then re-raises the broker's exception. The run in
    flight receives this same event as its stop signal.

    Args:
        path: the socket path, passed to `listen`.
        run: the job, ``run(stop, trigger, payload) -> Outcome``.
        executor: instead of *run*, a hand-written executor ``executor(queue, stop)``.
        capacity: the queue's capacity.
        stop: the daemon's stop event (default: the broker's own).
        loop_factory: makes the thread's event loop (default: asyncio's).
        **server_options: passed to `Server` (``payload_type``, ``decode``,
            hooks, bounds, ``logger``).

    Returns:
        The running broker; call `BrokerThread.stop` (or use ``with``) to shut down.

    Raises:
        ValueError: neither or both of *run* and *executor*.
        AlreadyServing, NotASocket, OSError: from `listen`.
    """
    if (run is None) == (executor is None):
        raise ValueError("pass run or executor, exactly one of them")
    queue: Queue[P] = Queue(capacity)
    server: Server[P] = Server(queue, **server_options)
    sock = listen(path)
    thread_stop = stop if stop is not None else threading.Event()
    broker = BrokerThread(queue, os.fspath(path), thread_stop)

    async def work(astop: asyncio.Event) -> None:
        if run is not None and is_async(run):
            await execute(queue, run, stop=astop)
            return
        body: Executor[P] = executor if executor is not None else partial(run_jobs, run=run)  # type: ignore[arg-type]
        await in_worker(
            queue,
            body,
            thread_stop,
            track=executor is not None,
            started=broker._workers.append,
        )

    def main() -> None:
        try:
            with asyncio.Runner(loop_factory=loop_factory) as runner:
                runner.run(broker._main(server, sock, work))
        except BaseException as exc:
            broker._error = exc
        finally:
            sock.close()
            broker._ready.set()
            thread_stop.set()  # the app learns the broker ended, whatever the reason

    thread = threading.Thread(target=main, name="sched-trigger-broker", daemon=True)
    broker._thread = thread
    thread.start()
    broker._ready.wait()
    return broker
