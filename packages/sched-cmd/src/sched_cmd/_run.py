"""`run`, `arun`, the `CommandRunner` protocol and `command_runner`."""

from __future__ import annotations

import threading
from datetime import timedelta

from ._child import Child
from ._compat import TYPE_CHECKING, final
from ._core import DEFAULT_GRACE, Command, Input, Options, Outcome, execute, go_duration
from ._durations import Duration, to_timedelta
from ._result import CompletedRun
from ._stopwatch import Subscription, start_helper
from ._wakeup import Wakeup, signals_wake

if TYPE_CHECKING:
    import asyncio
    import logging
    from typing import Any, Protocol
else:  # the protocol speaks to type checkers: no typing import at run time
    Protocol = object

__all__ = ["CommandRunner", "arun", "command_runner", "run"]


def run(
    args: Command,
    *,
    stop: threading.Event | None = None,
    grace: Duration = DEFAULT_GRACE,
    timeout: Duration | None = None,
    kill_group: bool = False,
    check: bool = False,
    input: Input | None = None,
    capture_output: bool = False,
    logger: logging.Logger | None = None,
    **popen_kwargs: Any,
) -> CompletedRun[Any]:
    """Run a command like ``subprocess.run``, stopping it gracefully on request.

    Everything ``subprocess.run`` accepts keeps working (``stdout``, ``stderr``,
    ``text``, ``encoding``, ``cwd``, ``env``, ...); piped input and output of
    any size never deadlock. On top of that, when *stop* is set or *timeout*
    passes, the child gets SIGTERM, then SIGKILL if it is still alive after
    *grace*; the child is always reaped. Once the child has exited, waiting
    for its output pipes to close is bounded by *grace* too, counted from the
    SIGTERM or the exit, whichever came first (Go's ``WaitDelay``): a
    grandchild that keeps a pipe open cannot hang the call, and what the pipes
    held is returned.

    A run stopped through *stop* returns normally: the returncode is
    ``-signal.SIGTERM`` (or ``-signal.SIGKILL`` after the grace) as
    ``subprocess`` reports signals, unless the child caught SIGTERM and chose
    its own exit status. If *stop* is already set when ``run`` is called, no
    child is started and the result is that of an immediate stop: returncode
    ``-signal.SIGTERM`` and empty output. Either way the result's ``stopped``
    is true (its ``sigterm_at`` and ``sigkill_at`` say when the signals were
    sent), and ``check=True`` raises `CommandFailed`, a
    ``CalledProcessError`` whose message says the run was stopped.

    Waiting does not poll: one ``select`` covers the pipes, the child's exit
    (a pidfd on Linux, a waiter thread elsewhere) and a self-pipe woken when
    *stop* is set. One helper thread per distinct stop event waits on it
    (``Event.wait()``), sends the SIGTERM the moment it is set and wakes the
    runs; it ends once no run waits on the event (within its current wait
    slice: 50 ms doubling to a minute).

    Setting *stop* from a signal handler is safe as far as ``run`` is
    concerned: it never holds the event's lock, and in the main thread it
    makes the process's wakeup fd (``signal.set_wakeup_fd``) wake its wait
    while it waits, unless the application has set one, so a handler runs
    at once. The application's own ``stop.wait()`` or ``stop.clear()`` in
    the main thread, interrupted by such a handler, can still deadlock:
    ``sched_loop.stop_on_signals`` sets the event from a helper thread
    instead.

    Args:
        args: the command, as for ``subprocess.run``.
        stop: set it to stop the child gracefully.
        grace: how long the child has between SIGTERM and SIGKILL (a
            ``timedelta`` or seconds); non-positive means `DEFAULT_GRACE`.
        timeout: stop the child gracefully after this long and raise
            ``TimeoutExpired``.
        kill_group: start the child as the leader of its own process group
            (``process_group=0``) and signal the whole group, so descendants
            that stay in it stop too; when the child exits by itself, members
            of its group still alive get the same SIGTERM, grace, SIGKILL
            sweep. A descendant that leaves the group (``setsid()``, a shell
            with job control) escapes both and outlives the run. The result's
            ``group`` reports the sweep.
        check: raise ``CalledProcessError`` on a non-zero returncode.
        input: data sent to the child's stdin (``str`` in text mode).
        capture_output: capture stdout and stderr (``PIPE`` both).
        logger: where to log signals and escalations; defaults to the
            ``sched_cmd`` logger.
        **popen_kwargs: passed to ``subprocess.Popen``.

    Returns:
        A `CompletedRun`: the ``subprocess.CompletedProcess``, whose
        ``group`` reports what a ``kill_group`` run did to the process group.

    Raises:
        subprocess.TimeoutExpired: *timeout* passed; raised after the child was
            stopped and reaped, with the output captured so far.
        CommandFailed: *check* and a non-zero returncode (a
            ``subprocess.CalledProcessError``).
        ValueError: conflicting arguments (``input`` with ``stdin``,
            ``capture_output`` with ``stdout``/``stderr``, ``kill_group`` with a
            foreign ``process_group``) or an invalid duration.
        TypeError: *stop* is not a ``threading.Event``.
        OSError: the command could not be started.
    """
    if stop is not None and not isinstance(stop, threading.Event):
        raise TypeError(f"stop must be a threading.Event, not {type(stop).__name__}")
    options = Options(
        args,
        grace=grace,
        timeout=timeout,
        kill_group=kill_group,
        check=check,
        input=input,
        capture_output=capture_output,
        logger=logger,
        popen_kwargs=popen_kwargs,
    )
    # Each object below exists before what it owns: whatever interrupts this
    # call (a KeyboardInterrupt, at any point), the child it started is killed
    # and reaped, the wakeup fd it replaced is back, no descriptor stays open
    # and no subscription stays behind (see _atomic, _child and _wakeup).
    wakeup = Wakeup()
    try:
        with signals_wake(wakeup):
            if stop is None:
                outcome = execute(options, wakeup)
            elif stop.is_set():
                outcome = options.not_started()
            else:
                subscription = Subscription(stop, wakeup.request_stop)
                try:
                    subscription.start()
                    outcome = execute(options, wakeup)
                finally:
                    subscription.cancel()
    finally:
        wakeup.close()
    return options.finish(outcome)


async def arun(
    args: Command,
    *,
    stop: asyncio.Event | None = None,
    grace: Duration = DEFAULT_GRACE,
    timeout: Duration | None = None,
    kill_group: bool = False,
    check: bool = False,
    input: Input | None = None,
    capture_output: bool = False,
    logger: logging.Logger | None = None,
    **popen_kwargs: Any,
) -> CompletedRun[Any]:
    """Run a command from asyncio; the twin of `run`, with cancellation as a stop.

    The sync core runs in a dedicated thread, so everything `run` guarantees
    holds here too. *stop* is an ``asyncio.Event``: setting it stops the child
    gracefully and ``arun`` returns as `run` does. Cancelling the awaiting
    task performs the same SIGTERM, *grace*, SIGKILL and reap before the
    ``CancelledError`` is re-raised; a second cancellation during the grace
    sends SIGKILL at once, still reaping before re-raising.

    Args:
        args: the command, as for ``subprocess.run``.
        stop: set it to stop the child gracefully.
        grace: as for `run`.
        timeout: as for `run`.
        kill_group: as for `run`.
        check: as for `run`.
        input: as for `run`.
        capture_output: as for `run`.
        logger: as for `run`.
        **popen_kwargs: passed to ``subprocess.Popen``.

    Returns:
        A `CompletedRun`, as `run` returns.

    Raises:
        asyncio.CancelledError: the task was cancelled (the child is reaped first).
        subprocess.TimeoutExpired: as for `run`.
        CommandFailed: as for `run`.
        ValueError: as for `run`.
        TypeError: *stop* is not an ``asyncio.Event``.
        OSError: the command could not be started.
    """
    import asyncio

    if stop is not None and not isinstance(stop, asyncio.Event):
        raise TypeError(f"stop must be an asyncio.Event, not {type(stop).__name__}")
    options = Options(
        args,
        grace=grace,
        timeout=timeout,
        kill_group=kill_group,
        check=check,
        input=input,
        capture_output=capture_output,
        logger=logger,
        popen_kwargs=popen_kwargs,
    )
    if stop is not None and stop.is_set():
        return options.finish(options.not_started())

    loop = asyncio.get_running_loop()
    done: asyncio.Future[Outcome] = loop.create_future()
    wakeup = Wakeup()
    child = Child(kill_group=options.kill_group)  # owns nothing yet

    def work() -> None:
        try:
            outcome = execute(options, wakeup, child)
        except BaseException as error:  # delivered to the awaiting task
            loop.call_soon_threadsafe(done.set_exception, error)
        else:
            loop.call_soon_threadsafe(done.set_result, outcome)

    # The waiting runs in a helper thread that blocks every signal (it never
    # takes one meant for the main thread); the child is started here, in the
    # loop's thread, because a process inherits its creator's signal mask.
    thread = threading.Thread(target=work, name="sched_cmd arun", daemon=True)
    try:
        child.start(options.args, options.popen_kwargs)
        start_helper(thread)
    except BaseException:
        if thread.ident is None:  # the thread, once started, owns the child
            try:
                child.abort()
            finally:
                child.close()
                wakeup.close()
        raise

    watcher: asyncio.Task[Any] | None = None
    cancelled: asyncio.CancelledError | None = None
    try:
        if stop is not None:
            watcher = loop.create_task(stop.wait())

            def on_stop(task: asyncio.Task[Any]) -> None:
                if not task.cancelled():
                    wakeup.request_stop()

            watcher.add_done_callback(on_stop)
        while True:
            try:
                outcome = await asyncio.shield(done)
                break
            except asyncio.CancelledError as error:
                if cancelled is None:
                    cancelled = error
                    wakeup.request_stop()
                else:
                    wakeup.request_kill()
    finally:
        if watcher is not None:
            watcher.cancel()
        if not done.done():
            wakeup.request_kill()  # an exception other than cancellation: kill, reap, go
        thread.join()  # at once, unless the line above had to kill the child
        wakeup.close()
    if cancelled is not None:
        raise cancelled
    return options.finish(outcome)


class CommandRunner(Protocol):
    """Runs a command the way `run` does, with the grace already chosen.

    The seam between job orchestration and subprocesses, as the Go library's
    ``CommandRunner``: production code takes a ``CommandRunner`` (built by
    `command_runner`) and tests pass a fake with the same signature, which
    returns ``CompletedRun(args, returncode)``.
    """

    def __call__(
        self,
        args: Command,
        *,
        stop: threading.Event | None = None,
        timeout: Duration | None = None,
        kill_group: bool = False,
        check: bool = False,
        input: Input | None = None,
        capture_output: bool = False,
        logger: logging.Logger | None = None,
        **popen_kwargs: Any,
    ) -> CompletedRun[Any]:
        """Run *args*; see `run`."""


@final
class _GracefulRunner:
    """The production `CommandRunner`: `run` with a fixed grace."""

    __slots__ = ("_grace",)

    def __init__(self, grace: timedelta) -> None:
        self._grace = grace

    @property
    def grace(self) -> timedelta:
        """The grace between SIGTERM and SIGKILL."""
        return self._grace

    def __repr__(self) -> str:
        return f"command_runner(grace={go_duration(self._grace)!r})"

    def __call__(
        self,
        args: Command,
        *,
        stop: threading.Event | None = None,
        timeout: Duration | None = None,
        kill_group: bool = False,
        check: bool = False,
        input: Input | None = None,
        capture_output: bool = False,
        logger: logging.Logger | None = None,
        **popen_kwargs: Any,
    ) -> CompletedRun[Any]:
        """Run *args* with this runner's grace; see `run`."""
        return run(
            args,
            stop=stop,
            grace=self._grace,
            timeout=timeout,
            kill_group=kill_group,
            check=check,
            input=input,
            capture_output=capture_output,
            logger=logger,
            **popen_kwargs,
        )


def command_runner(grace: Duration = DEFAULT_GRACE) -> CommandRunner:
    """Return the production `CommandRunner`: `run` bound to *grace*.

    The Go library's ``NewCommandRunner``. Inject the result where a job runs
    commands, so its tests can pass a fake instead.

    Args:
        grace: the time between SIGTERM and SIGKILL (a ``timedelta`` or
            seconds); non-positive means `DEFAULT_GRACE`.

    Returns:
        A callable with `run`'s signature, less ``grace``.

    Raises:
        ValueError: *grace* is NaN, infinite, a ``bool`` or out of range.
        TypeError: *grace* is not a duration.
    """
    value = to_timedelta(grace, name="grace")
    return _GracefulRunner(value if value > timedelta(0) else DEFAULT_GRACE)
