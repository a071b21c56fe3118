"""The library's own threads for the asyncio driver's blocking steps (PostgreSQL).

``arun`` on :meth:`Exclusive.postgres` runs each step of the rules (their
statements) off the event loop. Never on the loop's default executor: a
stalled database would fill it with waiting statements, and the
application's own ``asyncio.to_thread`` calls and ``loop.getaddrinfo`` (every
outbound connection it makes) would queue behind them. The steps run here
instead, on at most :data:`MAX_WORKERS` threads of this process (calls past
that wait their turn; each step ends within the statement deadline). Worker
threads start with every signal blocked; a forked child makes its own pool.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import _pgprocess

__all__ = ["MAX_WORKERS", "submit"]

#: The most threads the asyncio driver's steps run on at once, per process.
MAX_WORKERS = 16

_LOCK = threading.Lock()
_EXECUTOR: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _EXECUTOR
    with _LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = ThreadPoolExecutor(MAX_WORKERS, thread_name_prefix="sched-exclusive-io")
        return _EXECUTOR


def submit(loop: asyncio.AbstractEventLoop, work: Callable[[], Any], handed: list[object]) -> None:
    """Run ``work`` on the library's threads, and append its future to ``handed``.

    The pool starts a thread inside the hand-over when it needs one, and a new
    thread takes its creator's signal mask: every signal is blocked around it,
    which also makes the hand-over and its record one step for a signal
    handler's exception (Ctrl-C's ``KeyboardInterrupt``): one raised before it
    leaves ``handed`` empty and nothing to wait for; after it, the caller
    waits for the work, which is on its way.
    """
    executor = _EXECUTOR or _executor()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        handed.append(loop.run_in_executor(executor, work))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _after_fork() -> None:
    global _LOCK, _EXECUTOR
    _LOCK = threading.Lock()
    _EXECUTOR = None  # the parent's threads are not this process's


_pgprocess.after_fork(_after_fork)
