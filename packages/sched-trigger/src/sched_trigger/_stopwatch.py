"""Calling back when a ``threading.Event`` is set, without polling.

A ``threading.Event`` cannot be waited on together with anything else, and the
library never polls. So one helper thread per event waits on it and, once it is
set, calls every subscribed callback. The thread ends with the event; a waiter
that subscribes to an event already set is called back at once.

This module is on the client's import path only when the caller passes a stop
event (and has therefore loaded ``threading`` already).
"""

from __future__ import annotations

import itertools
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["subscribe"]

_lock = threading.Lock()
# Keyed by id(event): the watcher holds the event, so the id cannot be reused
# while its entry exists.
_watchers: dict[int, _Watcher] = {}
_keys = itertools.count()


class _Watcher:
    """The helper thread of one event and the callbacks waiting on it."""

    __slots__ = ("callbacks", "event", "thread")

    def __init__(self, event: threading.Event) -> None:
        self.event = event
        self.callbacks: dict[int, Callable[[], object]] = {}
        self.thread = threading.Thread(
            target=self._watch, name="sched-trigger stop watcher", daemon=True
        )

    def _watch(self) -> None:
        self.event.wait()
        with _lock:
            if _watchers.get(id(self.event)) is self:
                del _watchers[id(self.event)]
            # Under the lock: unsubscribe takes it too, so once it has returned
            # its callback is never called (a socket it shuts down may be closed).
            for callback in self.callbacks.values():
                callback()
            self.callbacks.clear()


def subscribe(event: threading.Event, callback: Callable[[], object]) -> Callable[[], None]:
    """Call *callback* (quick, non-blocking, idempotent) once *event* is set.

    Returns:
        The function that cancels the subscription; after it returns, *callback*
        is not called any more.
    """
    if event.is_set():
        callback()
        return _nothing
    with _lock:
        key = next(_keys)
        watcher = _watchers.get(id(event))
        start = watcher is None
        if watcher is None:
            watcher = _watchers[id(event)] = _Watcher(event)
        watcher.callbacks[key] = callback
    if start:
        watcher.thread.start()
    if event.is_set():
        # Its watcher may have finished between our look-up and the subscription.
        callback()

    def unsubscribe() -> None:
        with _lock:
            watcher.callbacks.pop(key, None)

    return unsubscribe


def _nothing() -> None:
    pass
