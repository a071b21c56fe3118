"""``Exclusive``: the public face of the coalescing rules, sync and asyncio."""

from __future__ import annotations

import logging
import os
import typing
from collections.abc import Awaitable, Callable

from ._backend import Backend
from ._coalesce import Lines, Step, coalesce
from ._errors import CoordinationError
from ._files import FileBackend, join
from ._outcome import LOCK_NAME, QUEUE_NAME, Outcome

__all__ = ["Exclusive"]

_LOGGER = logging.getLogger("sched_exclusive")


@typing.final
class Exclusive:
    """Cross-process run coalescing: at most one cycle at a time, no demand lost.

    A runner holds a flock(2) on ``dir/cycle.lock`` for the whole job. A
    request that finds it busy either records a rerun request in the counter
    ``dir/cycle.queued`` and returns at once (:meth:`run`, queue mode: the
    active runner reruns the job for it, so the request is satisfied by a run
    that starts after it arrived) or drops its tick (:meth:`run_or_skip`,
    skip mode). Nobody ever blocks for the job's duration. The kernel drops
    the lock when its holder dies, so a crash never wedges the job; a counter
    orphaned by a crash is cleared by the next acquisition, whose run
    satisfies it.

    The runner reruns the job once per queued request, also after a failed
    run (each request is owed a run), at most 8 times per call; demand left
    past that cap, or behind a closed gate, stays recorded for the next
    acquisition. Both files are created on first use and never deleted, and
    Python and Go processes built on the Go library can share one directory.

    A failure of the counter file never strands demand, as in the Go
    library: one while settling the counter before the first run is reported
    and the job runs all the same; one after a run stops the reruns and
    releases the lock, and the look at the counter after the release still
    hands the lock back to queued demand.

    Only the calling process acts for a call. A process the job forks
    (``fork()`` without ``exec``, a ``multiprocessing`` fork pool) never
    releases the lock nor touches the counter: one that ends with
    ``sys.exit()`` only closes its copy of the lock, and one that returns
    from the job returns from the call at once (``ran``), leaving the queued
    demand to the process that took the lock. An exception from a signal
    handler (Ctrl-C's ``KeyboardInterrupt``), wherever it lands, propagates
    with the lock already released.

    An instance holds no state between calls and may be shared by threads.

    Args:
        dir: the directory holding the two files; it must exist. Place it
            where untrusted local users cannot write (the files are opened
            following symlinks, as in the Go library).
        logger: where the coalescing lines go; defaults to the
            ``sched_exclusive`` logger.
        queue_capacity: how many rerun requests may wait while a cycle runs
            (default 1: one queued rerun satisfies every request that arrived
            before it starts). A value below 1 is taken as 1.
        gate: consulted each time a run is about to start (the first run,
            each queued rerun, each handoff); ``False`` stops runs from
            starting. Wire it to the shutdown signal, e.g.
            ``lambda: not stop.is_set()``. Requests are still recorded while
            it is closed: it decides what runs, not what queues.

    Raises:
        TypeError: ``queue_capacity`` is not an ``int``, or ``gate`` is not
            callable.

    Example::

        ex = Exclusive("/config")
        try:
            outcome = ex.run(run_cycle)
        except ExclusiveError as exc:
            outcome = exc.outcome  # and log exc
    """

    __slots__ = ("_backend", "_capacity", "_dir", "_gate", "_lines")

    def __init__(
        self,
        dir: str | os.PathLike[str],
        *,
        logger: logging.Logger | None = None,
        queue_capacity: int = 1,
        gate: Callable[[], bool] | None = None,
    ) -> None:
        if isinstance(queue_capacity, bool) or not isinstance(queue_capacity, int):
            raise TypeError(f"queue_capacity must be an int, not {queue_capacity!r}")
        if gate is not None and not callable(gate):
            raise TypeError(f"gate must be callable or None, not {gate!r}")
        self._dir = os.fspath(dir)
        self._capacity = max(queue_capacity, 1)
        self._gate = gate
        self._backend: Backend = FileBackend(self._dir)
        self._lines = Lines(logger if logger is not None else _LOGGER, {"dir": self._dir})

    def __repr__(self) -> str:
        return f"Exclusive({self._dir!r}, queue_capacity={self._capacity})"

    @property
    def dir(self) -> str:
        """The directory holding ``cycle.lock`` and ``cycle.queued``."""
        return self._dir

    @property
    def lock_path(self) -> str:
        """``dir/cycle.lock``: pass it to :func:`sched_lock.read_holder`."""
        return join(self._dir, LOCK_NAME)

    @property
    def queue_path(self) -> str:
        """``dir/cycle.queued``: the queued-request counter file."""
        return join(self._dir, QUEUE_NAME)

    @property
    def queue_capacity(self) -> int:
        """The effective queue capacity (at least 1)."""
        return self._capacity

    def _coalesce(self, *, queue: bool) -> Step:
        return coalesce(
            self._backend,
            queue=queue,
            capacity=self._capacity,
            gate=self._gate,
            log=self._lines,
        )

    def run(self, job: Callable[[], object]) -> Outcome:
        """Run ``job`` under the cycle lock, or queue a rerun if a cycle is in flight.

        Queue mode, for demand-driven callers (a poll subcommand): the request
        must be satisfied by a run that starts after it arrived.

        * Lock free: run the job now, then once per request queued meanwhile
          (``ran``, or ``ran-queued`` if reruns happened).
        * Lock busy, queue below capacity: record a request and return at once
          (``queued``); the active runner serves it.
        * Lock busy, queue full: drop the request (``discarded``): the queued
          rerun already starts after it arrived.

        ``queued`` and ``discarded`` are success for the requesting process.

        Args:
            job: called with no argument; its return value is ignored and
                what it raises is collected.

        Returns:
            The outcome.

        Raises:
            RunError: the job raised (in the first run or any rerun), or the
                gate raised, or the lock or counter failed while this call
                held the lock; ``.outcome`` says what ran, ``.exceptions``
                holds every error, ``.attempts`` the run each came from, and
                ``.own`` is this call's own run's failure (``None`` when only
                reruns served for other requests failed).
            CoordinationError: the lock or counter failed before any run
                (``.outcome`` is ``none``, or ``queued`` when the request was
                recorded but the re-probe failed).
            KeyboardInterrupt: and any other ``BaseException`` from the job,
                at once, after the lock is released.

        .. versionchanged:: 0.2.0
           A counter failure once the lock is won no longer stops the run:
           it is reported in the ``RunError`` and the job runs (outcome
           ``ran``), as in the Go library.
        """
        return _drive(self._coalesce(queue=True), job)

    def run_or_skip(self, job: Callable[[], object]) -> Outcome:
        """Run ``job`` under the cycle lock, or skip this tick if a cycle is in flight.

        Skip mode, for time-driven callers (a loop tick, where the next tick
        provides freshness): a busy lock logs a warning (the job overruns its
        interval) and returns ``skipped`` without recording anything. When
        the lock is free it behaves exactly as :meth:`run`'s acquired path,
        queued reruns included.

        Args:
            job: called with no argument.

        Returns:
            The outcome.

        Raises:
            RunError: as for :meth:`run`.
            CoordinationError: as for :meth:`run` (``.outcome`` ``none``).
        """
        return _drive(self._coalesce(queue=False), job)

    async def arun(self, job: Callable[[], Awaitable[object]]) -> Outcome:
        """Await ``job()`` under the cycle lock, or queue a rerun: :meth:`run` for asyncio.

        The lock and counter operations are a few microseconds of system
        calls and run on the event loop; the job is awaited there too.
        Cancelling the task releases the lock and propagates at once.

        Args:
            job: a coroutine function taking no argument.

        Returns:
            The outcome.

        Raises:
            RunError: as for :meth:`run`.
            CoordinationError: as for :meth:`run`.
        """
        return await _adrive(self._coalesce(queue=True), job)

    async def arun_or_skip(self, job: Callable[[], Awaitable[object]]) -> Outcome:
        """Await ``job()`` under the cycle lock, or skip: :meth:`run_or_skip` for asyncio.

        Args:
            job: a coroutine function taking no argument.

        Returns:
            The outcome.

        Raises:
            RunError: as for :meth:`run`.
            CoordinationError: as for :meth:`run`.
        """
        return await _adrive(self._coalesce(queue=False), job)

    def pending(self) -> int:
        """Read how many rerun requests are queued (observability only).

        The value may change the moment it is read. Unreadable content
        counts as zero.

        Returns:
            The queued-request count.

        Raises:
            CoordinationError: the counter file could not be read
                (``.outcome`` is ``none``).
        """
        try:
            return self._backend.read_counter()
        except OSError as exc:
            raise CoordinationError.from_os_error(exc, Outcome.NONE) from exc


def _drive(step: Step, job: Callable[[], object]) -> Outcome:
    """Call ``job`` each time ``step`` asks for a run; return its outcome."""
    try:
        next(step)
        while True:
            failure: Exception | None = None
            try:
                job()
            except Exception as exc:
                failure = exc
            except BaseException as exc:
                step.throw(exc)  # releases the lock, then re-raises exc
                raise
            step.send(failure)
    except StopIteration as stop:
        outcome: Outcome = stop.value
        return outcome
    finally:
        # An exception that lands outside the job (a SIGINT right after it
        # returned) leaves the rules suspended: release the lock now, not
        # when the traceback holding this frame is dropped.
        step.close()


async def _adrive(step: Step, job: Callable[[], Awaitable[object]]) -> Outcome:
    """Await ``job()`` each time ``step`` asks for a run; return its outcome."""
    try:
        next(step)
        while True:
            failure: Exception | None = None
            try:
                await job()
            except Exception as exc:
                failure = exc
            except BaseException as exc:  # CancelledError included
                step.throw(exc)
                raise
            step.send(failure)
    except StopIteration as stop:
        outcome: Outcome = stop.value
        return outcome
    finally:
        step.close()  # as in _drive
