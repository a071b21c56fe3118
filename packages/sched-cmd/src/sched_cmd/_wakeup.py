"""Waking a waiting run from other threads, and from signals, without polling.

A run waits in one ``select`` over the child's pipes, its exit descriptor and
the read end of a `Wakeup` self-pipe. Another thread asks it to stop
gracefully or to kill at once by setting a flag and writing one byte; a stop
request also sends the SIGTERM right there, in the requesting thread, so the
signal does not wait for the run's thread to wake.

A ``threading.Event`` has no descriptor to select on: the run subscribes to
its stop event through ``_stopwatch`` (a helper thread shared by every run
waiting on that event, which ends once none does), and the subscription
makes the stop request.

Only public APIs of the standard library are used. In particular the run's
thread never takes the event's lock (it calls only ``is_set()``), so a
SIGTERM handler that calls ``stop.set()`` in the main thread, wherever the
main thread is inside `run`, never waits for a lock its own thread holds.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
from collections.abc import Callable, Iterator

from ._atomic import close_all, store, store_each
from ._compat import final

__all__ = ["Wakeup", "signals_wake"]


@final
class Wakeup:
    """A self-pipe carrying two requests: stop gracefully, or kill at once.

    Its two descriptors are never out of its hands (see ``_atomic``); one
    that is dropped unclosed (its creation interrupted) closes them when it
    is collected.
    """

    __slots__ = (
        "_closed",
        "_fds",
        "_lock",
        "_stop_action",
        "kill_requested",
        "stop_requested",
    )

    def __init__(self) -> None:
        self._fds: list[int] = []  # [read end, write end]
        self._lock = threading.Lock()
        self._closed = False
        self.stop_requested = False
        self.kill_requested = False
        self._stop_action: Callable[[], object] | None = None
        if hasattr(os, "pipe2"):
            store_each(self._fds, os.pipe2, os.O_NONBLOCK | os.O_CLOEXEC)
        else:  # macOS
            store_each(self._fds, os.pipe)
            for fd in self._fds:
                os.set_blocking(fd, False)

    def fileno(self) -> int:
        """Return the descriptor that becomes readable when a request arrives."""
        return self._fds[0]

    def signal_fd(self) -> int:
        """Return the write end, for ``signal.set_wakeup_fd`` (see `signals_wake`)."""
        return self._fds[1]

    def set_stop_action(self, action: Callable[[], object] | None) -> None:
        """Have *action* run in the requesting thread on every stop request.

        The run sets it to "send SIGTERM" once the child is started, so the
        signal leaves without waiting for the run's thread to wake; it clears
        it (waiting for a running action to finish) before the child is released.
        """
        with self._lock:
            self._stop_action = action

    def request_stop(self) -> None:
        """Ask the run to stop the child gracefully (SIGTERM, grace, SIGKILL)."""
        self._request(kill=False)

    def request_kill(self) -> None:
        """Ask the run to kill the child at once (SIGKILL), still reaping it."""
        self._request(kill=True)

    def _request(self, *, kill: bool) -> None:
        with self._lock:
            if kill:
                self.kill_requested = True
            elif self.stop_requested:
                return  # already requested: the reader has its byte
            else:
                self.stop_requested = True
            if self._closed:
                return
            try:
                if not kill and self._stop_action is not None:
                    self._stop_action()
            finally:
                # A full pipe holds earlier wake-ups: the reader wakes anyway.
                with contextlib.suppress(BlockingIOError):
                    os.write(self._fds[1], b"!")

    def forward(self, fd: int) -> None:
        """Move the bytes waiting in the pipe to *fd* (signal numbers meant for it)."""
        data = b""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self._fds[0], 4096):
                data += chunk
        if data:
            # As the interpreter does with its wakeup fd: a full or closed one loses nothing
            # more than a wake-up its reader will get from the bytes already there.
            with contextlib.suppress(OSError):
                os.write(fd, data)

    def clear(self) -> None:
        """Consume pending wake-up bytes (the flags keep the requests)."""
        try:
            while os.read(self._fds[0], 4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        """Close both ends; later requests only set the flags."""
        with self._lock:
            self._closed = True
            close_all(self._fds)

    def __del__(self) -> None:
        # Only a Wakeup whose creation or run was interrupted gets here open.
        fds = getattr(self, "_fds", None)
        if fds:
            close_all(fds)


#: ``signal.set_wakeup_fd(fd, warn_on_full_buffer=False)``, callable from C (see ``_atomic``).
_install = functools.partial(signal.set_wakeup_fd, warn_on_full_buffer=False)


@contextlib.contextmanager
def signals_wake(wakeup: Wakeup) -> Iterator[None]:
    """While a run waits in the main thread, have every signal wake its ``select``.

    Python runs a signal handler in the main thread between two bytecodes. A
    signal that lands after the last such check and before ``select`` blocks
    would wait until ``select`` returns for another reason: an application's
    SIGTERM handler, setting the run's stop event, might never run. The
    interpreter's answer is ``signal.set_wakeup_fd``: its C-level handler
    writes the signal number there at once. So, in the main thread, the
    run's self-pipe is the wakeup fd while it waits, unless the application
    has one already (``sched_loop.stop_on_signals``, asyncio), whose reader
    then does that job: it is put back at once, with any signal number that
    landed in between.

    Whatever interrupts it (an exception from a signal handler, at any
    point), the wakeup fd it replaced is back when it exits: the replaced
    one is recorded in the same C call that installs the run's
    (see ``_atomic``), so the cleanup always knows what to put back. Call
    it before the self-pipe is shared (nothing else writes to it yet), and
    close the `Wakeup` only after it returns.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    ours = wakeup.signal_fd()
    replaced: list[int] = []  # the wakeup fd ours replaced, while ours may be in place
    try:
        with contextlib.suppress(ValueError):  # the main thread of a sub-interpreter
            store(replaced, _install, ours)
        if replaced and replaced[0] != -1:
            # There is no way to read the wakeup fd without setting one. The
            # interpreter's default warn_on_full_buffer comes back with it.
            previous = replaced[0]
            _put_back(replaced, ours)
            wakeup.forward(previous)
        yield
    finally:
        try:
            _put_back(replaced, ours)
        finally:
            # A no-op, unless an exception landed in the call above before it
            # acted (it is on its way now, and this one is not interrupted).
            _put_back(replaced, ours)


def _put_back(replaced: list[int], ours: int) -> None:
    """Put back the wakeup fd that *ours* replaced, if *replaced* still names it."""
    if not replaced:
        return
    previous = replaced[0]
    swapped: list[int] = []
    store(swapped, signal.set_wakeup_fd, previous)
    if swapped[0] not in (ours, previous):
        # Ours was replaced meanwhile (by a handler): keep that one.
        signal.set_wakeup_fd(swapped[0])
    replaced.clear()
