"""``Exclusive``: the public face of the coalescing rules, sync and asyncio.

Its arguments are checked in :mod:`._arguments`; the rules (:mod:`._coalesce`)
are driven by :mod:`._driver`, over :mod:`._files` or :mod:`._postgres`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable

from ._arguments import checked_capacity, checked_gate, existing_directory, postgres_arguments
from ._backend import Backend
from ._coalesce import Lines, Step, coalesce
from ._compat import TYPE_CHECKING, final
from ._driver import adrive, drive, on_loop
from ._errors import CoordinationError
from ._files import FileBackend, join
from ._outcome import LOCK_NAME, QUEUE_NAME, Outcome

if TYPE_CHECKING:
    from typing import Any

    from ._durations import Duration

__all__ = ["Exclusive"]

_LOGGER = logging.getLogger("sched_exclusive")


@final
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
    :meth:`postgres` makes one that coordinates machines through PostgreSQL
    instead of a directory, with the same rules. Both kinds have
    :attr:`location` (the directory, or the PostgreSQL job's name) and
    :attr:`queue_capacity`; :attr:`dir`, :attr:`lock_path` and
    :attr:`queue_path` are a directory's alone, and raise `AttributeError`
    on a PostgreSQL one.

    Args:
        dir: the directory holding the two files. It must exist: it is
            never created (make it, mode ``0o700``, owned by the job's
            user), and one that is missing or not a directory is refused
            here. Place it where untrusted local users cannot write (the
            files are opened following symlinks, as in the Go library).
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
        CoordinationError: ``dir`` does not exist, cannot be reached, or is
            not a directory (an `OSError` naming it, outcome ``none``).
        TypeError: ``queue_capacity`` is not an ``int``, or ``gate`` is not
            callable.

    Example::

        ex = Exclusive("/config")
        try:
            outcome = ex.run(run_cycle)
        except ExclusiveError as exc:
            outcome = exc.outcome  # and log exc
    """

    __slots__ = ("_backend", "_capacity", "_dir", "_gate", "_lines", "_name", "_off_loop")

    def __init__(
        self,
        dir: str | os.PathLike[str],
        *,
        logger: logging.Logger | None = None,
        queue_capacity: int = 1,
        gate: Callable[[], bool] | None = None,
    ) -> None:
        directory = existing_directory(os.fspath(dir))
        backend = FileBackend(directory, logger if logger is not None else _LOGGER)
        self._setup(backend, logger, queue_capacity, gate, {"dir": directory})
        self._dir: str | None = directory
        self._name: str | None = None
        self._off_loop = False

    def _setup(
        self,
        backend: Backend,
        logger: logging.Logger | None,
        queue_capacity: int,
        gate: Callable[[], bool] | None,
        fields: dict[str, Any],
    ) -> None:
        self._capacity = checked_capacity(queue_capacity)
        self._gate = checked_gate(gate)
        self._backend: Backend = backend
        self._lines = Lines(logger if logger is not None else _LOGGER, fields)

    @classmethod
    def postgres(
        cls,
        conninfo: str,
        name: str,
        *,
        logger: logging.Logger | None = None,
        queue_capacity: int = 1,
        gate: Callable[[], bool] | None = None,
        connect_timeout: Duration = 10,
        statement_timeout: Duration = 5,
    ) -> Exclusive:
        """The same coalescing across machines, coordinated through PostgreSQL.

        Every replica of a job that passes the same ``conninfo`` database and
        ``name`` shares one cycle: the lock is a session-level advisory lock
        (``pg_try_advisory_lock`` on `advisory_key` of ``name``), held on a
        connection of its own for the whole run, which PostgreSQL releases
        when that session ends, as the kernel releases a dead process's
        flock; the counter is the ``queued`` column of ``name``'s row in the
        ``sched_exclusive`` table. :meth:`run`, :meth:`run_or_skip`,
        :meth:`arun`, :meth:`arun_or_skip` and :meth:`pending` follow the
        same rules, outcomes, log lines (their ``extra`` field ``job``, the
        name, instead of ``dir``) and errors as with a directory.

        What differs is what a network adds: a holder checks its session
        before each rerun and watches it while the job runs (see
        `lock_lost`); a lost session ends the call with a
        `RunError` holding an ``ENOLCK`` error, the queued demand left
        recorded. A server that does not answer ends a call within the
        timeouts with `CoordinationError` (``errno.ETIMEDOUT``, outcome
        ``none`` when nothing ran). A transaction-pooling proxy in between
        (PgBouncer ``pool_mode=transaction``), which breaks session locks, is
        refused with `CoordinationError`. ``arun`` and ``arun_or_skip`` talk
        to the database off the event loop. Connections are pooled per
        process and per ``conninfo``; the table is created by a holder's
        first cycle (or beforehand: ``python -m sched_exclusive init-postgres
        CONNINFO``), never by a read: `pending` needs SELECT alone. Each
        cycle's fencing token (`fencing_token`) is drawn by the statement
        that starts it, and a job writing to the same database can fence its
        own transaction with `fence` (`afence`). See the "Across machines"
        page for the guarantees.

        It needs the ``postgres`` extra (``pip install
        'sched-exclusive[postgres]'``, psycopg 3), imported only here.

        Args:
            conninfo: a libpq connection string or URI; libpq's ``PG*``
                environment variables fill what it leaves out. Keepalives
                default to 10 s idle, 5 s interval, 3 probes and a 25 s
                ``tcp_user_timeout``, on the client and (for this session)
                on the server, unless ``conninfo`` sets them.
            name: the job's name across machines (the analogue of the
                directory); any non-empty text without NUL, at most 2,600
                bytes in UTF-8.
            logger: as for :class:`Exclusive`.
            queue_capacity: as for :class:`Exclusive`.
            gate: as for :class:`Exclusive`; with ``arun`` it is still
                called on the event loop's thread.
            connect_timeout: how long one connection attempt may take
                (whole seconds, at least 2, libpq's rule); a ``timedelta``
                or a number of seconds.
            statement_timeout: how long one statement may run on the
                server; the client gives up one second after it, whatever
                the server does.

        Returns:
            The coordinator.

        Raises:
            ModuleNotFoundError: psycopg is not installed (install the
                ``postgres`` extra).
            TypeError: an argument of the wrong type.
            ValueError: an empty ``name``, one with NUL or a lone surrogate,
                or one over 2,600 bytes in UTF-8; a ``conninfo`` libpq cannot
                parse; a timeout that is not positive, a ``connect_timeout``
                under 2 s, or a ``statement_timeout`` of 2**31 ms or more.
        """
        from ._postgres import PostgresBackend

        connect, statement = postgres_arguments(conninfo, name, connect_timeout, statement_timeout)
        self = cls.__new__(cls)
        lines_logger = logger if logger is not None else _LOGGER
        backend = PostgresBackend(
            conninfo,
            name,
            connect_timeout=connect,
            statement_timeout=statement,
            logger=lines_logger,
        )
        self._setup(backend, logger, queue_capacity, gate, {"job": name})
        self._dir = None
        self._name = name
        self._off_loop = True
        return self

    def __repr__(self) -> str:
        if self._dir is None:
            return f"Exclusive.postgres(..., {self._name!r}, queue_capacity={self._capacity})"
        return f"Exclusive({self._dir!r}, queue_capacity={self._capacity})"

    def _directory(self) -> str:
        if self._dir is None:
            raise AttributeError(
                f"Exclusive.postgres(..., {self._name!r}) coordinates through PostgreSQL: "
                "it has no directory (.location names where it coordinates)"
            )
        return self._dir

    @property
    def dir(self) -> str:
        """The directory holding ``cycle.lock`` and ``cycle.queued``.

        Raises:
            AttributeError: the instance coordinates through PostgreSQL.
        """
        return self._directory()

    @property
    def lock_path(self) -> str:
        """``dir/cycle.lock``: pass it to :func:`sched_lock.read_holder`.

        Raises:
            AttributeError: the instance coordinates through PostgreSQL.
        """
        return join(self._directory(), LOCK_NAME)

    @property
    def queue_path(self) -> str:
        """``dir/cycle.queued``: the queued-request counter file.

        Raises:
            AttributeError: the instance coordinates through PostgreSQL.
        """
        return join(self._directory(), QUEUE_NAME)

    @property
    def location(self) -> str:
        """Where the cycle is coordinated, for either kind: the directory, or
        ``postgresql job 'NAME'`` for :meth:`postgres` (the conninfo, which
        may hold a password, is never shown)."""
        return self._dir if self._dir is not None else f"postgresql job {self._name!r}"

    @property
    def queue_capacity(self) -> int:
        """The effective queue capacity (at least 1)."""
        return self._capacity

    def _coalesce(self, *, queue: bool, gate: Callable[[], bool] | None = None) -> Step:
        return coalesce(
            self._backend,
            queue=queue,
            capacity=self._capacity,
            gate=self._gate if gate is None else gate,
            log=self._lines,
        )

    async def _acoalesce(self, job: Callable[[], Awaitable[object]], *, queue: bool) -> Outcome:
        if not self._off_loop:
            return await adrive(self._coalesce(queue=queue), job, None)
        import asyncio

        loop = asyncio.get_running_loop()
        gate = self._gate
        called_on_loop = None if gate is None else on_loop(loop, gate)
        return await adrive(self._coalesce(queue=queue, gate=called_on_loop), job, loop)

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
        """
        return drive(self._coalesce(queue=True), job)

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
        return drive(self._coalesce(queue=False), job)

    async def arun(self, job: Callable[[], Awaitable[object]]) -> Outcome:
        """Await ``job()`` under the cycle lock, or queue a rerun: :meth:`run` for asyncio.

        The lock and counter operations are a few microseconds of system
        calls and run on the event loop; the job is awaited there too.
        Cancelling the task releases the lock and propagates at once. With
        :meth:`postgres` the rules and their statements run on threads of the
        library's own (at most 16 per process) instead, so a slow database
        never stalls the loop nor fills its default executor;
        a cancellation then waits for the statement in flight (within the
        timeouts), releases, and propagates.

        Args:
            job: a coroutine function taking no argument.

        Returns:
            The outcome.

        Raises:
            RunError: as for :meth:`run`.
            CoordinationError: as for :meth:`run`.
        """
        return await self._acoalesce(job, queue=True)

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
        return await self._acoalesce(job, queue=False)

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
