"""Waking a waiting run from other threads, without polling.

A run waits in one ``select`` over the child's pipes, its exit descriptor and
the read end of a `Wakeup` self-pipe. Another thread asks it to stop
gracefully or to kill at once by setting a flag and writing one byte.

A ``threading.Event`` has no descriptor to select on. `subscribe` has two
ways to learn that one was set, without polling:

* the hook: ``threading.Event.set()`` calls ``notify_all()`` on the event's
  ``Condition``, which calls ``release()`` on every waiter queued in it; a
  run queues one more "waiter" whose ``release()`` makes the stop request
  right there, in the thread that set the event. No thread, no wake-up
  between ``set()`` and the SIGTERM. It relies on the standard library's
  pure-Python ``threading`` (``Event._cond``, ``Condition._waiters``): the
  same code in CPython 3.11 to 3.13 (tested here), in their free-threaded
  builds (the same module) and in PyPy; a later release could change it, so
  it is used only where those attributes are what they should be *and*
  a probe event shows that ``set()`` really releases a foreign waiter (a
  ``threading`` whose ``set()`` stops doing so falls back, not hangs);

  Why it is safe: the hook is queued and removed under the condition's
  lock, exactly as ``Condition.wait`` queues and removes its own waiters, so
  ``set()``, other waiters and timeouts see a consistent deque with or
  without the GIL. A ``set()`` racing the run's start is covered: the
  self-pipe is registered in the selector before anything else and the
  request (flag plus byte) is made whether or not the child exists yet, and
  ``execute`` starts no child once the flag is up. The hook's ``release()``
  runs in the setter's thread with the event's lock held, so it only takes
  the `Wakeup` lock, sends one signal and writes one byte; the run's thread
  holds no other lock when it takes the event's (to queue or remove the
  hook), so the lock order is always event, then `Wakeup`; and it never
  raises into ``set()``;
* otherwise, a helper thread per distinct stop event waits on it and wakes
  every run subscribed to it. It ends once the event is set; an event that
  is never set keeps its one daemon helper for the life of the process,
  which is why runs share the helper rather than starting one each.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from collections.abc import Callable
from typing import final

__all__ = ["Wakeup", "subscribe"]


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


@final
class _SetHook:
    """Queued among a Condition's waiters: ``Event.set()`` "releases" it (the fast path)."""

    __slots__ = ("_wakeup",)

    def __init__(self, wakeup: Wakeup) -> None:
        self._wakeup = wakeup

    def release(self) -> None:
        """Make the stop request, in the thread calling ``Event.set()``."""
        # Never fail the caller's set(): should the SIGTERM fail here, the run's
        # thread, woken all the same, sends it again and meets the error itself.
        with contextlib.suppress(Exception):
            self._wakeup.request_stop()


@final
class _Probe:
    """A foreign waiter that records whether ``Event.set()`` released it."""

    __slots__ = ("released",)

    def __init__(self) -> None:
        self.released = False

    def release(self) -> None:
        """Record the call."""
        self.released = True


def _set_releases_foreign_waiters() -> bool:
    """Tell whether ``threading.Event.set()`` calls ``release()`` on an extra waiter.

    Checked on a throwaway event each time (a few microseconds, beside the
    fork and exec of a run), so a ``threading`` that changed or was patched
    is caught instead of leaving a run deaf to its stop.
    """
    event = threading.Event()
    waiters = getattr(getattr(event, "_cond", None), "_waiters", None)
    if not isinstance(waiters, collections.deque):
        return False
    probe = _Probe()
    waiters.append(probe)
    try:
        event.set()
    except Exception:
        return False
    return probe.released and probe not in waiters


def _hook(event: threading.Event, wakeup: Wakeup) -> Callable[[], None] | None:
    """Queue a `_SetHook` on *event*'s Condition; None where the internals differ.

    Returns:
        The function that removes the hook, or None (use the helper thread).
    """
    if type(event).set is not threading.Event.set:
        return None  # a subclass may set the flag without notifying the condition
    if not _set_releases_foreign_waiters():
        return None
    condition = getattr(event, "_cond", None)
    if not isinstance(condition, threading.Condition):
        return None
    waiters = getattr(condition, "_waiters", None)
    if not isinstance(waiters, collections.deque):
        return None
    hook = _SetHook(wakeup)
    with condition:
        if event.is_set():
            hook.release()  # set meanwhile: nothing to wait for
        else:
            waiters.append(hook)

    def unhook() -> None:
        with condition, contextlib.suppress(ValueError):
            waiters.remove(hook)  # gone already if set() released it

    return unhook


def subscribe(event: threading.Event, wakeup: Wakeup) -> Callable[[], None]:
    """Have *wakeup* receive a stop request when *event* is set.

    Returns:
        A function that cancels the subscription; call it before closing *wakeup*.
    """
    unhook = _hook(event, wakeup)
    if unhook is not None:
        return unhook
    with _watchers_lock:
        watcher = _watchers.get(id(event))
        start = watcher is None
        if watcher is None:
            watcher = _watchers[id(event)] = _EventWatcher(event)
        watcher.subscribers.add(wakeup)
    if start:
        watcher.thread.start()
    # The watcher of an event that was set, cleared and set again may have gone
    # between our check and the subscription; this covers the race.
    if event.is_set():
        wakeup.request_stop()

    def unsubscribe() -> None:
        with _watchers_lock:
            watcher.subscribers.discard(wakeup)

    return unsubscribe
