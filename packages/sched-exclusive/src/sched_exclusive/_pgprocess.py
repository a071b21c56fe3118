"""The process's rules for the PostgreSQL backend: the fork rule and quiet threads.

* **The fork rule.** A session belongs to the process that opened it
  (:func:`inherited` says whether it does). In a process forked from it,
  whatever meets an inherited session abandons it at once (:func:`abandon`:
  this process's copy of its socket closed, once, without a word to the
  server, which would end the parent's session) and takes no lock on the
  way: a lock the parent's threads held at the fork (a lease's turn, a
  pool's, the monitor's) stays held in the child for ever. Everything else
  of the parent's (threads, locks, descriptors, the pools' idle sessions,
  the asyncio driver's threads) is dropped by the one at-fork hook below,
  which runs what each module registered with :func:`after_fork`.
* **Threads.** Every helper thread (deadlines, the monitor, its checks, the
  asyncio driver's workers) starts with every signal blocked (the deadline and
  monitor threads through ``_stopwatch.start_helper``, the one helper-thread
  start of every package), so a signal sent to the process always reaches
  the thread that handles it, never a helper the kernel happened to pick.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._pgsession import Session

__all__ = ["abandon", "after_fork", "inherited", "pid"]


#: This process's id (kept current across forks by the hook below).
_PID = os.getpid()
#: What each module drops in a forked child, in registration order.
_RESETS: list[Callable[[], None]] = []


def pid() -> int:
    """This process's id."""
    return _PID


def inherited(session: Session) -> bool:
    """The fork rule: whether ``session`` is another process's (this one was forked
    from its owner). Whoever finds it so abandons it and returns, taking no lock."""
    return session.owner != _PID


#: Sessions a forked process inherited: kept referenced, never used or closed
#: through libpq (that would end the parent's session).
_ABANDONED: list[Session] = []


def abandon(session: Session) -> None:
    """Close this process's copy of an inherited session's socket, once, without a word."""
    fd = session.fileno()
    session.closed = True  # before the close: the number may be reused at once
    if fd is not None:
        with suppress(OSError):
            os.close(fd)
    _ABANDONED.append(session)


def after_fork(reset: Callable[[], None]) -> None:
    """Run ``reset`` in a forked child, after this process's id is updated."""
    _RESETS.append(reset)


def _after_fork_in_child() -> None:
    """A forked process starts afresh: the parent's sessions, threads and locks are not its."""
    global _PID
    _PID = os.getpid()
    for reset in _RESETS:
        reset()


os.register_at_fork(after_in_child=_after_fork_in_child)
