"""Waking a waiting run from other threads, without polling.

A run waits in one ``select`` over the child's pipes, its exit descriptor and
the read end of a `Wakeup` self-pipe. Another thread asks it to stop
gracefully or to kill at once by setting a flag and writing one byte; a stop
request also sends the SIGTERM right there, in the requesting thread, so the
signal does not wait for the run's thread to wake.

A ``threading.Event`` has no descriptor to select on, and its public API
offers one way to learn that it was set without polling: ``wait()``. So one
helper thread per distinct stop event waits on it and makes the stop
request to every run subscribed to it. The helper ends once the event is
set; an event that is never set keeps its one daemon helper (blocked, using
no CPU) for the life of the process, which is why runs share the helper
rather than starting one each, and why an application should share one stop
event between its runs.

Only public APIs of the standard library are used. In particular the run's
thread never takes the event's lock (it calls only ``is_set()``), so a
SIGTERM handler that calls ``stop.set()`` in the main thread, wherever the
main thread is inside `run`, never waits for a lock its own thread holds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import final

__all__ = ["Wakeup", "signals_wake", "start_with_signals_blocked", "subscribe"]


def start_with_signals_blocked(thread: threading.Thread) -> None:
    """Start a helper *thread* that never receives a signal sent to the process.

    The kernel delivers a process-directed signal to any thread that does
    not block it. Were it a helper, the main thread, blocked in a run's
    ``select``, would not run its Python-level handler until it woke for
    another reason: an application's SIGTERM handler could wait for ever.
    A new thread inherits the creating thread's mask, so the signals are
    blocked around ``start()``; a helper must not start processes (they
    would inherit the mask too).
    """
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@final
class Wakeup:
    """A self-pipe carrying two requests: stop gracefully, or kill at once."""

    __slots__ = (
        "_closed",
        "_lock",
        "_read_fd",
        "_stop_action",
        "_write_fd",
        "kill_requested",
        "stop_requested",
    )

    def __init__(self) -> None:
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._lock = threading.Lock()
        self._closed = False
        self.stop_requested = False
        self.kill_requested = False
        self._stop_action: Callable[[], object] | None = None

    def fileno(self) -> int:
        """Return the descriptor that becomes readable when a request arrives."""
        return self._read_fd

    def signal_fd(self) -> int:
        """Return the write end, for ``signal.set_wakeup_fd`` (see `signals_wake`)."""
        return self._write_fd

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
                    os.write(self._write_fd, b"!")

    def forward(self, fd: int) -> None:
        """Move the bytes waiting in the pipe to *fd* (signal numbers meant for it)."""
        data = b""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self._read_fd, 4096):
                data += chunk
        if data:
            # As the interpreter does with its wakeup fd: a full or closed one loses nothing
            # more than a wake-up its reader will get from the bytes already there.
            with contextlib.suppress(OSError):
                os.write(fd, data)

    def clear(self) -> None:
        """Consume pending wake-up bytes (the flags keep the requests)."""
        try:
            while os.read(self._read_fd, 4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        """Close both ends; later requests only set the flags."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            os.close(self._read_fd)
            os.close(self._write_fd)


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

    Call it before the self-pipe is shared (nothing else writes to it yet),
    and close the `Wakeup` only after it returns.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    try:
        previous = signal.set_wakeup_fd(wakeup.signal_fd(), warn_on_full_buffer=False)
    except ValueError:  # the main thread of a sub-interpreter
        yield
        return
    if previous != -1:
        # There is no way to read the wakeup fd without setting one. The
        # interpreter's default warn_on_full_buffer comes back with it.
        signal.set_wakeup_fd(previous)
        wakeup.forward(previous)
        yield
        return
    try:
        yield
    finally:
        current = signal.set_wakeup_fd(-1)
        if current != wakeup.signal_fd():  # replaced meanwhile (by a handler): keep that one
            signal.set_wakeup_fd(current)


_watchers_lock = threading.Lock()
# Keyed by id(event): the watcher holds the event, so the id cannot be reused
# while its entry exists.
_watchers: dict[int, _EventWatcher] = {}


@final
class _EventWatcher:
    """One helper thread per stop event, waking every subscribed run when it is set."""

    __slots__ = ("event", "subscribers", "thread")

    def __init__(self, event: threading.Event) -> None:
        self.event = event
        self.subscribers: set[Wakeup] = set()
        self.thread = threading.Thread(
            target=self._watch, name="sched_cmd stop watcher", daemon=True
        )

    def _watch(self) -> None:
        self.event.wait()
        with _watchers_lock:
            if _watchers.get(id(self.event)) is self:
                del _watchers[id(self.event)]
            # Under the lock: a run unsubscribes (under the same lock) before it
            # closes its Wakeup, so no request reaches a closed descriptor.
            for wakeup in self.subscribers:
                wakeup.request_stop()
            self.subscribers.clear()


def subscribe(event: threading.Event, wakeup: Wakeup) -> Callable[[], None]:
    """Have *wakeup* receive a stop request when *event* is set.

    Returns:
        A function that cancels the subscription; call it before closing *wakeup*.
    """
    with _watchers_lock:
        watcher = _watchers.get(id(event))
        if watcher is None:
            watcher = _EventWatcher(event)
            # Started under the lock (the thread needs it only once the event is
            # set): should it fail, no run is left subscribed to a deaf watcher.
            start_with_signals_blocked(watcher.thread)
            _watchers[id(event)] = watcher
        watcher.subscribers.add(wakeup)
    # The watcher of an event that was set, cleared and set again may have gone
    # between our check and the subscription; this covers the race.
    if event.is_set():
        wakeup.request_stop()

    def unsubscribe() -> None:
        with _watchers_lock:
            watcher.subscribers.discard(wakeup)

    return unsubscribe
