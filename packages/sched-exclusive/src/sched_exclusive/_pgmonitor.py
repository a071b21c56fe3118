"""The session monitor: it watches the sessions of held leases, and holds the loss bound.

One thread per process, started with the first held lease. On Linux each
held session's socket is registered for hang-up only, so the server's
goodbye wakes the thread at once; every :data:`SESSION_CHECK_INTERVAL`
seconds it checks each held session with a statement, which also catches a
silent network. **The loss bound:** the checks that are due run at once, one
thread each, every one under the statement's deadline (the statement timeout
plus :data:`._pgsession.ANSWER_GRACE`), so however many locks a process
holds, a silent network is noticed within ``SESSION_CHECK_INTERVAL +
statement_timeout + ANSWER_GRACE`` of its start.
"""

from __future__ import annotations

import os
import select
import threading
import time
import weakref
from contextlib import suppress
from typing import TYPE_CHECKING

from . import _pgprocess
from ._stopwatch import start_helper

if TYPE_CHECKING:
    from ._pglease import PgLease

__all__ = ["SESSION_CHECK_INTERVAL", "Monitor", "monitor", "watched_leases"]

#: Seconds between two checks of a held session while the job runs.
SESSION_CHECK_INTERVAL = 2.0


class Monitor:
    """Watches the sessions of held leases: their sockets closing, and a periodic check.

    One thread per process, started with the first lease. On Linux each held
    session's socket is registered for hang-up only (``EPOLLRDHUP``), by the
    holder itself, so the server's goodbye (``pg_terminate_backend``, a
    restart, a reset) wakes the thread at once while answers to the rules'
    own statements never do. Every :data:`SESSION_CHECK_INTERVAL` seconds the
    thread checks each held session with a statement, which also catches a
    silent network under the deadline. A lease is watched by its identity and
    weakly (a dropped lease is collected, and its finalizer releases the
    lock), with the descriptor registered when the watch began; a lost lease
    is watched no more. The thread sleeps for good once nothing has been held
    for two intervals.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # id(lease) -> (the lease, weakly; the descriptor registered for it)
        self._leases: dict[int, tuple[weakref.ref[PgLease], int]] = {}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._epoll = select.epoll() if hasattr(select, "epoll") else None
        self._hangup = getattr(select, "EPOLLRDHUP", 0) | getattr(select, "EPOLLHUP", 0)
        self._idle = True  # the thread sleeps without a timeout
        self._thread: threading.Thread | None = None

    def watching(self) -> int:
        """How many held leases are watched."""
        with self._lock:
            return sum(ref() is not None for ref, _ in self._leases.values())

    def watch(self, lease: PgLease, fd: int) -> None:
        with self._lock:
            self._leases[id(lease)] = (weakref.ref(lease), fd)
            wake = self._idle
            self._idle = False
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sched-exclusive-monitor", daemon=True
                )
                start_helper(self._thread)
        if self._epoll is not None:
            with suppress(OSError):
                self._epoll.register(fd, self._hangup)
        if wake:
            with suppress(BlockingIOError):
                os.write(self._wake_w, b"\0")

    def unwatch(self, lease: PgLease) -> None:
        with self._lock:
            entry = self._leases.get(id(lease))
            if entry is None or entry[0]() is not lease:
                return
            self._drop(id(lease))

    def _drop(self, key: int) -> None:
        """Forget one entry (under the lock); its descriptor's registration goes
        too, unless another watched lease's socket has that number now."""
        _, fd = self._leases.pop(key)
        # A comprehension, not a generator: a short-circuited generator is
        # closed where CPython swallows what a signal handler raises.
        if self._epoll is not None and fd not in {other for _, other in self._leases.values()}:
            with suppress(OSError):
                self._epoll.unregister(fd)

    def forget(self) -> None:
        """Close this process's copy of the parent's descriptors (after a fork)."""
        for fd in (self._wake_r, self._wake_w):
            with suppress(OSError):
                os.close(fd)
        if self._epoll is not None:
            with suppress(OSError):
                self._epoll.close()

    def _wait(self, timeout: float | None) -> list[int]:
        """The descriptors that woke the thread (the wake pipe drained)."""
        if self._epoll is not None:
            if timeout is None:
                self._epoll.register(self._wake_r, select.EPOLLIN)
            try:
                ready = [fd for fd, _ in self._epoll.poll(-1 if timeout is None else timeout)]
            finally:
                if timeout is None:
                    with suppress(OSError):
                        self._epoll.unregister(self._wake_r)
        else:
            ready, _, _ = select.select([self._wake_r], [], [], timeout)
        if self._wake_r in ready:
            with suppress(BlockingIOError):
                os.read(self._wake_r, 4096)
        return [fd for fd in ready if fd != self._wake_r]

    def _run(self) -> None:
        quiet_since: float | None = None
        next_check = time.monotonic() + SESSION_CHECK_INTERVAL
        while True:
            now = time.monotonic()
            with self._lock:
                held = bool(self._leases)
                if held:
                    quiet_since = None
                elif quiet_since is None:
                    quiet_since = now
                linger = quiet_since is not None and now - quiet_since > 2 * SESSION_CHECK_INTERVAL
                self._idle = linger
            if linger:
                hung_up = self._wait(None)  # nothing held for a while: sleep until a watch
                next_check = time.monotonic() + SESSION_CHECK_INTERVAL
            else:
                hung_up = self._wait(max(next_check - now, 0.0))
            with self._lock:
                watched = list(self._leases.items())
            due = time.monotonic() >= next_check
            if due:
                next_check = time.monotonic() + SESSION_CHECK_INTERVAL
            checks = [
                (key, ref) for key, (ref, fd) in watched if due or fd in hung_up or ref() is None
            ]
            # The loss bound: the checks due run at once, each under its own
            # deadline, so the pass takes one deadline however many are due.
            helpers = [
                threading.Thread(
                    target=self._check, args=check, name="sched-exclusive-check", daemon=True
                )
                for check in checks[1:]
            ]
            for helper in helpers:
                start_helper(helper)
            if checks:
                self._check(*checks[0])
            for helper in helpers:
                helper.join()

    def _check(self, key: int, ref: weakref.ref[PgLease]) -> None:
        """Check one watched lease; one lost, released or collected is watched no more."""
        lease = ref()
        try:
            held = lease is not None and lease.check()
        except Exception as exc:  # the monitor must outlive any surprise
            lease.lose(f"the session check failed: {exc!r}")  # type: ignore[union-attr]
            held = False
        del lease
        if not held:
            with self._lock:
                entry = self._leases.get(key)
                if entry is not None and entry[0] is ref:
                    self._drop(key)


_STATE_LOCK = threading.Lock()
_MONITOR: Monitor | None = None


def monitor() -> Monitor:
    """This process's session monitor (made on first use)."""
    global _MONITOR
    monitor = _MONITOR
    if monitor is not None:
        return monitor
    with _STATE_LOCK:
        if _MONITOR is None:
            _MONITOR = Monitor()
        return _MONITOR


def watched_leases() -> int:
    """How many held leases this process's session monitor watches (for tests)."""
    monitor = _MONITOR
    return 0 if monitor is None else monitor.watching()


def _after_fork() -> None:
    global _STATE_LOCK, _MONITOR
    _STATE_LOCK = threading.Lock()
    if _MONITOR is not None:
        _MONITOR.forget()
    _MONITOR = None


_pgprocess.after_fork(_after_fork)
