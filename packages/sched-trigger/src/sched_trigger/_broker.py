"""The whole broker in a background thread, for daemons written without asyncio."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Generic, TypeVar, final

from ._durations import Duration
from ._execute import AsyncRun, SyncRun, execute
from ._job import Job
from ._listen import listen
from ._queue import Queue
from ._server import Server

__all__ = ["BrokerThread", "run_broker_in_thread"]

P = TypeVar("P")


@final
class BrokerThread(Generic[P]):
    """A running broker (socket server and executor) on its own event loop thread.

    Made by `run_broker_in_thread`. Submit the daemon's own runs (a ticker) with
    `submit` or straight to `queue` from any thread; `stop` shuts down in the
    documented order and joins the thread. Closing `queue` also ends the broker
    once the executor drained it. Usable as a context manager.
    """

    def __init__(self, queue: Queue[P], path: str) -> None:
        self.queue = queue
        self.path = path
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

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
        still queued are finished with `CANCELLED_REASON`. Idempotent.

        Args:
            timeout: bound on the join; ``None`` waits for the drain.

        Raises:
            TimeoutError: the thread did not finish in time.
            BaseException: whatever ended the broker abnormally (a ``run`` that raised).
        """
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        self.join(timeout)

    def join(self, timeout: Duration | None = None) -> None:
        """Wait for the broker thread to end (after `stop`, or after its executor failed).

        Args:
            timeout: bound on the join; ``None`` waits as long as it takes.

        Raises:
            TimeoutError: the thread did not finish in time.
            BaseException: whatever ended the broker abnormally (a ``run`` that raised).
        """
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
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

    async def _main(
        self, server: Server[P], sock: socket.socket, run: SyncRun[P] | AsyncRun[P]
    ) -> None:
        self._loop = asyncio.get_running_loop()
        stop = self._stop = asyncio.Event()
        executor = asyncio.create_task(execute(self.queue, run, stop=stop))
        serving = asyncio.create_task(server.serve(sock))
        self._ready.set()
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait((executor, stopping), return_when=asyncio.FIRST_COMPLETED)
        finally:
            server.close()
            self.queue.close()
            stop.set()
            try:
                await executor
            finally:
                await serving
                await server.wait()
                stopping.cancel()


def run_broker_in_thread(
    path: str | os.PathLike[str],
    run: SyncRun[P] | AsyncRun[P],
    *,
    capacity: int = 16,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
    **server_options: Any,
) -> BrokerThread[P]:
    """Run the whole broker (queue, socket server, executor) on a background thread.

    For a daemon written without asyncio: the socket is created here (so
    `AlreadyServing` and friends raise in the caller), then a daemon thread
    runs an event loop with `Server` and `execute`. ``run(stop, trigger,
    payload)`` is called as `execute` calls it (a plain function in a worker
    thread with a ``threading.Event``). Opt into uvloop with
    ``loop_factory=uvloop.new_event_loop``; the library never swaps the loop by
    itself.

    Args:
        path: the socket path, passed to `listen`.
        run: the job, ``run(stop, trigger, payload) -> Outcome``.
        capacity: the queue's capacity.
        loop_factory: makes the thread's event loop (default: asyncio's).
        **server_options: passed to `Server` (``payload_type``, ``decode``,
            hooks, bounds, ``logger``).

    Returns:
        The running broker; call `BrokerThread.stop` (or use ``with``) to shut down.

    Raises:
        AlreadyServing, NotASocket, OSError: from `listen`.
    """
    queue: Queue[P] = Queue(capacity)
    server: Server[P] = Server(queue, **server_options)
    sock = listen(path)
    broker = BrokerThread(queue, os.fspath(path))

    def main() -> None:
        try:
            with asyncio.Runner(loop_factory=loop_factory) as runner:
                runner.run(broker._main(server, sock, run))
        except BaseException as exc:
            broker._error = exc
        finally:
            sock.close()
            broker._ready.set()

    thread = threading.Thread(target=main, name="sched-trigger-broker", daemon=True)
    broker._thread = thread
    thread.start()
    broker._ready.wait()
    return broker
