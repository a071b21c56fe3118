"""Helper threads that never take a signal, and callbacks when a ``threading.Event`` is set.

One source, several copies: each sched package that needs this module keeps
a byte-identical private copy, so none depends on another at run time. The
source is ``tools/copied/_stopwatch.py``; ``python tools/copies.py`` writes
the copies, and a test fails when one differs. Edit the source, never a copy.

Helper threads. The kernel delivers a signal sent to the process (SIGTERM
from ``docker stop``, SIGINT from a terminal) to any one thread that does not
block it. Python runs the handler in the main thread only, between two
bytecodes: were a helper thread picked, a main thread blocked in a system
call would not notice the signal until something else woke it, and an
application's SIGTERM handler could wait for ever. `start_helper` starts a
thread with every signal blocked (a new thread inherits its creator's mask),
so the kernel always picks another thread. A helper must not start
processes: they would inherit the mask.

Stop events. A ``threading.Event`` has no descriptor to select on, and its
public API has one way to learn that it was set: ``wait()``, which nothing
but ``set()`` ends early. So one helper thread per event waits on it, shared
by every `Subscription` to that event, and calls their callbacks the moment
it is set. It waits in slices (``wait(timeout)``): 50 ms, then twice as long
each time, up to a minute. ``set()`` wakes it at once whatever the slice; a
helper that wakes at the end of a slice with no subscription left ends. So a
helper outlives the last subscription to its event by at most its current
slice (about as long as it had run, never more than a minute): a process
that waits on nothing keeps no helper, and a wait of hours costs a wake-up a
minute.
"""

from __future__ import annotations

import os
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Subscription", "start_helper", "subscribe"]

_FIRST_SLICE = 0.05
_LAST_SLICE = 60.0
#: The helper threads' name: "sched_cmd stop watcher" in sched_cmd's copy.
_NAME = __name__.partition(".")[0] + " stop watcher"


def start_helper(thread: threading.Thread) -> None:
    """Start *thread* with every signal blocked in it (see the module notes).

    An exception raised while it runs (a signal handler's, say) leaves the
    calling thread's signal mask as it was.

    Raises:
        RuntimeError: as ``threading.Thread.start`` (started twice, no more
            threads).
    """
    import signal

    # Read the mask first, changing nothing: whatever interrupts this
    # function from here on finds the mask to restore already known.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


_lock = threading.Lock()
# Keyed by id(event): the helper holds the event, so the id cannot be reused
# while its entry exists.
_watchers: dict[int, _Watcher] = {}


def _forget_after_fork() -> None:
    """In a forked child: no helper survived the fork, and the lock may be held."""
    global _lock
    _lock = threading.Lock()
    _watchers.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


class Subscription:
    """Call *callback* once *event* is set, until `cancel` is called.

    Made before it takes effect, so that whoever holds it can always undo it:
    an exception landing anywhere in `start` (a ``KeyboardInterrupt``) leaves
    nothing that `cancel` does not remove.

    Args:
        event: the event to watch.
        callback: quick, non-blocking and idempotent; called from the helper
            thread (or from `start`'s caller when the event is already set).
    """

    __slots__ = ("_callback", "_event", "_watcher")

    def __init__(self, event: threading.Event, callback: Callable[[], object]) -> None:
        self._event = event
        self._callback = callback
        self._watcher: _Watcher | None = None

    def start(self) -> None:
        """Take effect: the callback is called once the event is set (at once if it is)."""
        event = self._event
        if event.is_set():
            self._callback()
            return
        with _lock:
            watcher = _watchers.get(id(event))
            if watcher is None:
                watcher = _Watcher(event)
                # Under the lock, before the entry: a helper that started but
                # was never entered finds no subscription and ends.
                start_helper(watcher.thread)
                _watchers[id(event)] = watcher
            watcher.subscribers[self] = self._callback  # with no call in between:
            self._watcher = watcher  # cancel() always finds what start() added
        if event.is_set():
            # Set meanwhile: its helper may have called back before we joined.
            self._callback()

    def cancel(self) -> None:
        """End the subscription: once this returns, the callback is never called."""
        with _lock:
            watcher = self._watcher
            if watcher is not None:
                watcher.subscribers.pop(self, None)


def subscribe(event: threading.Event, callback: Callable[[], object]) -> Callable[[], None]:
    """Start a `Subscription` of *callback* to *event*; return its ``cancel``."""
    subscription = Subscription(event, callback)
    subscription.start()
    return subscription.cancel


class _Watcher:
    """The helper thread of one event and the subscriptions waiting on it."""

    __slots__ = ("event", "subscribers", "thread")

    def __init__(self, event: threading.Event) -> None:
        self.event = event
        #: Each subscription and its callback.
        self.subscribers: dict[Subscription, Callable[[], object]] = {}
        self.thread = threading.Thread(target=self._watch, name=_NAME, daemon=True)

    def _forget(self) -> None:
        """Leave the table (called under the lock)."""
        if _watchers.get(id(self.event)) is self:
            del _watchers[id(self.event)]

    def _watch(self) -> None:
        wait = _FIRST_SLICE
        while not self.event.wait(wait):
            with _lock:
                if not self.subscribers:
                    self._forget()
                    return
            wait = min(wait * 2, _LAST_SLICE)
        with _lock:
            self._forget()
            # Under the lock: once cancel() has returned, its callback is never
            # called (it may close what the callback touches).
            callbacks, self.subscribers = list(self.subscribers.values()), {}
            error: Exception | None = None
            for callback in callbacks:
                try:
                    callback()
                except Exception as exc:  # call the others; report the first
                    error = error or exc
        if error is not None:
            raise error
