"""The deadline thread: it shuts a session's socket down when a statement outlives
its deadline, so a stalled server or network ends the call in bounded time."""

from __future__ import annotations

import math
import threading
import time
import typing
import weakref

from . import _pgprocess
from ._stopwatch import start_helper

if typing.TYPE_CHECKING:
    from ._pgsession import Session

__all__ = ["Deadlines", "deadlines"]


class Deadlines:
    """Shuts a session's socket down when a statement outlives its deadline.

    One thread per process, started on first use, asleep while nothing is
    in flight. Arming costs a dict entry under a lock; the thread is woken
    only when a deadline earlier than its next wake-up arrives. An entry
    refers to its session weakly: a session dropped while armed (an
    interrupt between arming and disarming) is not kept alive, with its
    server backend, until its deadline.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._armed: dict[int, tuple[float, weakref.ref[Session]]] = {}
        self._tokens = 0
        self._wake_at = math.inf
        self._thread: threading.Thread | None = None

    def arm(self, session: Session, seconds: float) -> int:
        deadline = time.monotonic() + seconds
        with self._cond:
            self._tokens += 1
            token = self._tokens
            self._armed[token] = (deadline, weakref.ref(session))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sched-exclusive-deadlines", daemon=True
                )
                start_helper(self._thread)
            elif deadline < self._wake_at:
                self._cond.notify()
        return token

    def disarm(self, token: int) -> bool:
        """Forget ``token``; ``False`` when its deadline already fired."""
        with self._cond:
            return self._armed.pop(token, None) is not None

    def _run(self) -> None:
        while True:
            expired: list[weakref.ref[Session]] = []
            with self._cond:
                now = time.monotonic()
                for token, (deadline, ref) in list(self._armed.items()):
                    if deadline <= now:
                        del self._armed[token]
                        expired.append(ref)
                if not expired:
                    earliest = min((d for d, _ in self._armed.values()), default=math.inf)
                    self._wake_at = earliest
                    self._cond.wait(None if earliest == math.inf else earliest - now)
                    self._wake_at = 0.0
            while expired:  # no session stays referenced from here while it waits
                _abort(expired.pop())


def _abort(ref: weakref.ref[Session]) -> None:
    session = ref()
    if session is not None:  # a dropped one closed its socket with its connection
        session.abort()


_STATE_LOCK = threading.Lock()
_DEADLINES: Deadlines | None = None


def deadlines() -> Deadlines:
    """This process's deadline thread (made on first use)."""
    global _DEADLINES
    found = _DEADLINES
    if found is not None:
        return found
    with _STATE_LOCK:
        if _DEADLINES is None:
            _DEADLINES = Deadlines()
        return _DEADLINES


def _after_fork() -> None:
    global _STATE_LOCK, _DEADLINES
    _STATE_LOCK = threading.Lock()
    _DEADLINES = None  # the parent's thread is not this process's


_pgprocess.after_fork(_after_fork)
