"""A KeyboardInterrupt at every point of a PostgreSQL call may drop a session, never
poison a later call: what the pool counts as open is always what the server runs.

The pool refuses a new connection whose server backend answers for another
open session of the process (a pooler's sign); an interrupt that left a count
for a backend that has ended would, once the kernel lends that pid to a new
backend, turn every later call into a refusal. Slow (a call per interrupt
point, each opening its sessions anew): once per CI run, and in ``nox -s postgres``,
where it interrupts every 5th point; ``SCHED_SOAK=1`` interrupts every one.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
import warnings
from typing import Any

import pytest
from sched_exclusive_testkit import Interrupter, PgWorld, close_postgres_sessions, library_code

from sched_exclusive import (
    Exclusive,
    Outcome,
    _arguments,
    _coalesce,
    _driver,
    _exclusive,
    _postgres,
)

#: Interrupt every STRIDE-th point (every one in a soak run).
STRIDE = 1 if os.environ.get("SCHED_SOAK") == "1" else 5

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


def live_backends(world: PgWorld) -> set[int]:
    rows = world.conn.execute("SELECT pid FROM pg_stat_activity").fetchall()
    return {int(pid) for (pid,) in rows}


def stale_pids(world: PgWorld, pool: Any) -> set[int]:
    """The backends the pool counts as open that the server no longer runs (each
    given a second to go: a backend ends a moment after its client closes)."""
    deadline = time.monotonic() + 1.0
    while True:
        stale = set(pool.open_server_pids()) - live_backends(world)
        if not stale or time.monotonic() > deadline:
            return stale
        # sleep-ok: a closed session's backend ends a moment later (bounded above)
        time.sleep(0.02)


def test_an_interrupt_never_leaves_a_stale_open_session(pg: PgWorld) -> None:
    """Opening a session (and its witness) and lending it back, interrupted at every
    point in turn: afterwards the pool counts no backend the server has ended, and the
    next call runs."""
    if sys.version_info[:3] == (3, 12, 1) and sys.gettrace():
        pytest.skip("CPython 3.12.1 crashes when this tracer raises under coverage's")
    library = library_code(_arguments, _coalesce, _driver, _exclusive, _postgres)
    ex: Exclusive = pg.exclusive()
    pool: Any = ex._backend.pool  # type: ignore[attr-defined]

    def call() -> None:
        pool.give(pool.take())

    close_postgres_sessions()
    with Interrupter(library, 0):  # 3.12.1 sends no opcode events the first time: prime it
        call()
    stale_points: dict[int, set[int]] = {}
    n = 1 - STRIDE
    while True:
        n += STRIDE
        close_postgres_sessions()  # every call opens its sessions anew
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.disable()
            try:
                with (
                    Interrupter(library, n) as interrupter,
                    contextlib.suppress(KeyboardInterrupt, OSError),
                ):
                    call()
            finally:
                gc.enable()
            fired = interrupter.fired
            del interrupter
            gc.collect()
        stale = stale_pids(pg, pool)
        if stale:
            stale_points[n] = stale
        if not fired:
            break
    assert n > 60
    assert {} == stale_points
    close_postgres_sessions()
    assert Outcome.RAN == ex.run(lambda: None)
