"""An exception from a signal handler, wherever it lands, never leaks a held lock.

A ``KeyboardInterrupt`` (or whatever a signal handler raises) surfaces only at
the points where CPython runs pending handlers: as a call returns, at a loop's
backward jump, as a function starts or a generator resumes.
:class:`sched_exclusive_testkit.Interrupter` raises one at the n-th such point
inside the library's own code (sched_exclusive, its backend, and sched_lock),
for every n, and each time the call must propagate it with the cycle lock and
the counter's lock already free, while its traceback (and every frame in it)
is still alive. Each test runs once per backend (the ``world`` fixture).
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import CodeType

import pytest
from sched_exclusive_testkit import (
    Held,
    Interrupter,
    World,
    close_postgres_sessions,
    hooked,
    library_code,
)

import sched_lock._flock
import sched_lock._slot
from sched_exclusive import (
    ExclusiveError,
    Outcome,
    _arguments,
    _coalesce,
    _driver,
    _exclusive,
    _files,
)

#: A session an interrupt dropped before anyone owned it (as ``take()`` returned)
#: holds no lock; psycopg warns when it is collected, whenever the cycle of the
#: traceback that kept it is. A lock never outlives the call: that is asserted.
#: Slow (a call per interrupt point, hundreds per test): the suite runs once per
#: CI run, on the Python the single sessions use, and in ``nox -s postgres``.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


#: The modules a call runs through, on either backend (PostgreSQL's ``_postgres``
#: stands for every ``_pg*`` module: ``sched_exclusive_testkit.library_code``).
SHARED = (_arguments, _coalesce, _driver, _exclusive)
FLOCK = (*SHARED, _files, sched_lock._flock, sched_lock._slot)

#: sched-exclusive's modules no sweep traces, each with the reason.
UNTRACED = {
    "__init__": "imports and the version only",
    "__main__": "the command line, no call's path",
    "_advisory": "a pure hash, computed at construction",
    "_backend": "the seam's protocols: no code runs there",
    "_compat": "typing.final's stand-in, applied at import",
    "_durations": "argument coercion, at construction",
    "_errors": "the exception classes (their messages are built after the fact)",
    "_fence": "fencing_token() and fence(), called by the job, not by a call's steps",
    "_offloop": "hands work over with every signal blocked: no interrupt can land there",
    "_outcome": "an enum",
    "_status": "the status command's reading of a directory",
    "_stopwatch": "helper threads, started with every signal blocked",
}


def codes(world: World) -> frozenset[CodeType]:
    """The library's code a call on ``world`` runs through."""
    if world.kind == "flock":
        return library_code(*FLOCK)
    from sched_exclusive import _postgres

    return library_code(*SHARED, _postgres)


def test_every_module_is_swept_or_left_out_on_purpose() -> None:
    """A module split out of a swept one joins a sweep, or is named here with its
    reason: a refactor cannot silently shrink what the sweeps cover."""
    package = Path(_exclusive.__file__).parent
    modules = {path.stem for path in package.glob("*.py")}
    swept = {m.__name__.rpartition(".")[2] for m in SHARED} | {"_files", "_postgres"}
    swept |= {name for name in modules if name.startswith("_pg")}
    assert set() == modules - swept - set(UNTRACED)
    assert set() == set(UNTRACED) - modules  # no stale entry


@pytest.fixture
def place(world: World, tmp_path: Path) -> Iterator[World]:
    """The world; for a directory, descriptors an interrupt left open on its files are
    closed afterwards (one landing as open() returns can lose a descriptor, never a lock)."""
    if world.kind != "flock" and sys.version_info[:3] == (3, 12, 1) and sys.gettrace():
        pytest.skip(
            "CPython 3.12.1 crashes (SIGSEGV) when this tracer raises inside the PostgreSQL "
            "backend's calls under another tracer (coverage): run it without coverage, "
            "or on 3.11 or 3.13"
        )
    yield world
    if world.kind != "flock":
        return
    for entry in Path("/proc/self/fd").iterdir():
        try:
            target = entry.readlink()
        except FileNotFoundError:
            continue
        if target.is_relative_to(tmp_path):
            os.close(int(entry.name))


def assert_nothing_held(world: World, where: str = "") -> None:
    """Neither the cycle lock nor the counter's lock (its file's flock, its row's lock)
    is held: at once for a directory, once the server has read the goodbye of the
    sessions closed for PostgreSQL. ``where`` is where an interrupt fired."""
    after = f" (interrupted at {where})" if where else ""
    if world.kind == "flock":
        assert world.lock_is_free(), f"the cycle lock was left held{after}"
        fd = os.open(Path(world.label, "cycle.queued"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if it was left held
        finally:
            os.close(fd)
    else:
        frees = world.frees_everything()  # type: ignore[attr-defined]
        assert frees, f"the cycle lock or the row was left held{after}: {world.holders()}"  # type: ignore[attr-defined]


def passes(world: World) -> list[frozenset[CodeType]]:
    """The code each pass of a sweep counts interrupt points in.

    The n-th point of one call must be the n-th of the next, or a sweep skips
    a point (interrupting its neighbour twice). A directory's calls meet the
    same points every time: one pass. A PostgreSQL call waits on the wire in
    loops that turn as often as the server's timing makes them
    (:func:`_pgcommit._result`, :func:`_pgcommit._flush`), shifting every later
    point: the first pass counts every point but theirs, the second theirs
    alone. (A whole sweep skipped, in most runs, the point where the probe
    returned a won lock, the one point that leaked it.)
    """
    everything = codes(world)
    if world.kind == "flock":
        return [everything]
    from sched_exclusive import _pgcommit

    waits = frozenset({_pgcommit._result.__code__, _pgcommit._flush.__code__})
    assert waits <= everything
    return [everything - waits, waits]


def fresh(world: World) -> None:
    """Start a call from the same state as the last: an interrupt may have dropped a
    session the pool would otherwise have lent to the next call, which would then
    open one (more points), shifting every later point. PostgreSQL's idle sessions
    are closed before each call, so every call opens its own."""
    if world.kind != "flock":
        close_postgres_sessions()


def interrupt_everywhere(
    world: World, call: Callable[[], object], others: list[Held] | None = None
) -> int:
    """Run ``call`` once per interrupt point, interrupted there, in each of the
    :func:`passes`; return how many points there were.

    ``others`` collects locks the scenario itself takes as "another process";
    they are released after each run, as the interrupt may have landed in the
    scenario's own release of them.
    """
    return sum(sweep(world, call, others, library) for library in passes(world))


def sweep(
    world: World,
    call: Callable[[], object],
    others: list[Held] | None,
    library: frozenset[CodeType],
) -> int:
    """One pass: ``call`` interrupted at the n-th point in ``library``, for every n."""
    fresh(world)
    with Interrupter(library, 0):  # 3.12.1 sends no opcode events the first time: prime it
        call()
    n = 0
    while True:
        n += 1
        world.set_counter(0)
        fresh(world)
        with warnings.catch_warnings():
            # A lock returned into the interrupt is collected at once: it is
            # released, with the ResourceWarning of an unreleased lock.
            warnings.simplefilter("ignore", ResourceWarning)
            # A coroutine created but interrupted before its first step.
            warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
            # No automatic collection inside the call: finalizing leftovers of
            # earlier runs there (a generator's cleanup) would swallow the interrupt.
            gc.disable()
            try:
                with Interrupter(library, n) as interrupter:
                    interrupted: KeyboardInterrupt | None = None
                    try:
                        call()
                    except KeyboardInterrupt as exc:
                        interrupted = exc  # its traceback keeps every frame alive
                    except ExclusiveError:
                        pass
            finally:
                gc.enable()
        for lock in others or ():
            lock.unlock()
        if others:
            others.clear()  # released: not again after every later run
        if interrupted is not None:
            assert interrupter.fired
            assert_nothing_held(world, interrupter.where)
            # The traceback and its frames form a cycle: collect it now, with
            # what it kept (a session dropped into the interrupt holds no lock
            # but warns of its open connection, as a dropped lock does).
            del interrupted, interrupter  # its frame table keeps them too
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ResourceWarning)
                gc.collect(1)
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect(1)
        assert not interrupter.fired
        assert_nothing_held(world)
        return n - 1


def test_a_run_with_a_rerun(place: World) -> None:
    """Acquisition, the run, a request queued by another caller, its rerun, release."""
    other = place.exclusive()
    ex = place.exclusive()

    def call() -> Outcome:
        runs: list[None] = []

        def job() -> None:
            if not runs:
                other.run(lambda: None)
            runs.append(None)

        return ex.run(job)

    points = interrupt_everywhere(place, call)
    assert points > 100
    assert Outcome.RAN_QUEUED == call()


def test_a_reprobe_and_a_handoff(place: World) -> None:
    """A requester that queues and then wins the re-probe, and a holder that takes the
    lock back for a request that slipped in before its release."""

    holders: list[Held] = []

    def call() -> Outcome:
        ex = place.exclusive()
        backend = hooked(ex)
        backend.before_release[1] = lambda: place.exclusive().run(lambda: None)
        holder = place.hold()
        holders.append(holder)
        try:
            backend.after_probe[1] = holder.unlock
            return ex.run(lambda: None)
        finally:
            holder.unlock()

    points = interrupt_everywhere(place, call, holders)
    assert points > 100
    assert Outcome.RAN_QUEUED == call()


def test_skip_queue_and_discard(place: World) -> None:
    """The requester side: a busy lock skipped, queued, then discarded."""

    holders: list[Held] = []

    def call() -> None:
        holder = place.hold()
        holders.append(holder)
        try:
            ex = place.exclusive()
            ex.run_or_skip(lambda: None)
            ex.run(lambda: None)
            ex.run(lambda: None)
        finally:
            holder.unlock()

    assert interrupt_everywhere(place, call, holders) > 30


def test_asyncio(place: World) -> None:
    """The asyncio driver, with a rerun."""
    other = place.exclusive()
    ex = place.exclusive()

    def call() -> Outcome:
        runs: list[None] = []

        async def job() -> None:
            if not runs:
                other.run(lambda: None)
            runs.append(None)

        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(ex.arun(job))
        finally:
            loop.close()

    assert interrupt_everywhere(place, call) > 100
