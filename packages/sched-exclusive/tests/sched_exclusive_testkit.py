"""Helpers shared by sched-exclusive's tests.

* A *world* is one backend's real coordination, as the tests see it: a
  directory (:class:`FlockWorld`) or a job name in a real PostgreSQL database
  (:class:`PgWorld`). It makes coordinators, takes the lock as another
  holder would (a second open of ``cycle.lock``; another session's advisory
  lock), and reads and writes the counter behind the library's back. The
  ``world`` fixture (``conftest.py``) runs a test once per backend.
* :class:`Hooked` wraps a coordinator's real backend and runs one-shot
  callbacks at the step boundaries the coalescing rules care about: after a
  lock probe, before and after a release. That is how a test places "another
  process" exactly in a race window, in one process: another holder is the
  world's second lock, another requester a second coordinator.
* :class:`Interrupter` raises a KeyboardInterrupt at the n-th point inside the
  library where a signal handler could raise one, to prove that none of them
  leaks a held lock.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any, Protocol, final

import sched_testing

from sched_exclusive import CoordinationError, Exclusive, advisory_key, fencing_token
from sched_exclusive._backend import Backend, Change, Lease, Started
from sched_exclusive._files import parse_count
from sched_lock import try_lock

#: Set (by ``nox -s postgres`` and CI) when a missing server must fail, not skip.
POSTGRES_REQUIRED = os.environ.get("SCHED_TEST_POSTGRES_REQUIRED") == "1"


class Held(Protocol):
    """Another holder's lock."""

    def unlock(self) -> None: ...


class World(Protocol):
    """One backend's real coordination, as a test sees it."""

    #: ``"flock"`` or ``"postgres"``.
    kind: str
    #: The ``extra`` field every coalescing line carries, and its value.
    field: str
    label: str

    def exclusive(self, **kwargs: Any) -> Exclusive: ...
    def try_hold(self) -> Held | None: ...
    def hold(self) -> Held: ...
    def lock_is_free(self) -> bool: ...
    def counter(self) -> int: ...
    def set_counter(self, count: int) -> None: ...
    def write_raw(self, content: bytes) -> None: ...
    def close(self) -> None: ...


@final
class FlockWorld:
    """A directory: the lock file and the counter file."""

    kind = "flock"
    field = "dir"

    def __init__(self, directory: str) -> None:
        self.dir = self.label = directory
        self._held: list[Held] = []  # referenced: a collected Lock releases itself

    def exclusive(self, **kwargs: Any) -> Exclusive:
        return Exclusive(self.dir, **kwargs)

    def try_hold(self) -> Held | None:
        lock = try_lock(Path(self.dir, "cycle.lock"))
        if lock.busy:  # read in C: no interrupt point while a held lock is in a local
            return None
        self._held.append(lock)
        return lock

    def hold(self) -> Held:
        held = self.try_hold()
        assert held is not None, "the cycle lock is busy"
        return held

    def lock_is_free(self) -> bool:
        lock = try_lock(Path(self.dir, "cycle.lock"))
        if lock.busy:
            return False
        lock.unlock()
        return True

    def counter(self) -> int:
        return parse_count(read_counter_file(self.dir))

    def set_counter(self, count: int) -> None:
        Path(self.dir, "cycle.queued").write_bytes(b"%d\n" % count)

    def write_raw(self, content: bytes) -> None:
        Path(self.dir, "cycle.queued").write_bytes(content)

    def close(self) -> None:
        for held in self._held:
            held.unlock()


@final
class PgHeld:
    """Another session's advisory lock; unlocking releases it, then hands the session
    back to *spares* for the next holder (an interrupt sweep holds once per point).

    (Closing alone would release it too, but only once the server has processed
    the goodbye, a moment later: a test that looks at once would see it held.)
    """

    def __init__(self, conn: Any, spares: list[Any]) -> None:
        self.conn = conn
        self._spares: list[Any] | None = spares

    def unlock(self) -> None:
        if self._spares is not None and not self.conn.closed:
            self.conn.execute("SELECT pg_advisory_unlock_all()")
            self._spares.append(self.conn)
        self._spares = None


@final
class PgWorld:
    """A fresh job name in a real PostgreSQL database."""

    kind = "postgres"
    field = "job"

    def __init__(self, dsn: str, name: str | None = None) -> None:
        self.dsn = dsn
        self.name = self.label = name or f"test-{uuid.uuid4().hex[:12]}"
        self.key = advisory_key(self.name)
        self.conn = self._connect()
        from sched_exclusive._pgpool import pool_for
        from sched_exclusive._postgres import init_table

        init_table(pool_for(dsn))  # the table exists from here on, and the name's row
        self.conn.execute(
            "INSERT INTO sched_exclusive (name) VALUES (%s) ON CONFLICT DO NOTHING", (self.name,)
        )
        self._held: list[PgHeld] = []
        self._spares: list[Any] = []  # holders' sessions, idle, reused

    def _connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.dsn, autocommit=True)

    def exclusive(self, **kwargs: Any) -> Exclusive:
        return Exclusive.postgres(self.dsn, self.name, **kwargs)

    def try_hold(self) -> Held | None:
        conn = self._spares.pop() if self._spares else self._connect()
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
        if not (row and row[0]):
            self._spares.append(conn)
            return None
        held = PgHeld(conn, self._spares)
        self._held.append(held)
        return held

    def hold(self) -> Held:
        held = self.try_hold()
        assert held is not None, "the cycle lock is busy"
        return held

    def lock_is_free(self) -> bool:
        row = self.conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
        if row and row[0]:
            self.conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
            return True
        return False

    def frees_everything(self) -> bool:
        """Whether the lock and the counter's row are free, or become free within
        :data:`DEADLINE` (a session its client closed ends a moment later, once the
        server has read the goodbye): waits in the server, under ``lock_timeout``."""
        import psycopg

        self.conn.execute(f"SET lock_timeout = '{int(DEADLINE * 1000)}ms'")
        try:
            self.conn.execute("SELECT pg_advisory_lock(%s)", (self.key,))
            self.conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
            self.conn.execute(
                "SELECT FROM sched_exclusive WHERE name = %s FOR UPDATE", (self.name,)
            )
        except psycopg.errors.LockNotAvailable:
            return False
        finally:
            self.conn.execute("RESET lock_timeout")
        return True

    def holders(self) -> str:
        """The other sessions' granted locks that can block this job's lock or row,
        with what each session is doing: a failure's message."""
        rows = self.conn.execute(
            "SELECT l.locktype, l.mode, l.classid, l.objid, a.pid, a.application_name, "
            "a.state, now() - a.state_change, left(a.query, 120) "
            "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.granted AND l.pid <> pg_backend_pid() "
            "AND l.locktype IN ('advisory', 'transactionid', 'tuple')"
        ).fetchall()
        return "; ".join(repr(tuple(row)) for row in rows) or "no lock held"

    def counter(self) -> int:
        row = self.conn.execute(
            "SELECT queued FROM sched_exclusive WHERE name = %s", (self.name,)
        ).fetchone()
        return 0 if row is None else int(row[0])

    def set_counter(self, count: int) -> None:
        self.conn.execute(
            "INSERT INTO sched_exclusive (name, queued) VALUES (%s, %s) "
            "ON CONFLICT (name) DO UPDATE SET queued = EXCLUDED.queued",
            (self.name, count),
        )

    def write_raw(self, content: bytes) -> None:
        self.set_counter(parse_count(content))  # a row holds what the file would parse as

    def close(self) -> None:
        for held in self._held:
            held.unlock()
        for conn in [*self._spares, self.conn]:
            conn.close()


def close_postgres_sessions() -> None:
    """Close the idle sessions every ``Exclusive.postgres`` of this process pooled."""
    from sched_exclusive import _pgpool

    _pgpool.close_idle_sessions()


def watched_leases() -> int:
    """How many held leases this process's session monitor watches."""
    from sched_exclusive import _pgmonitor

    return _pgmonitor.watched_leases()


DEADLINE = 30.0
"""A generous upper bound for a child's answer; never the thing under test."""


@final
class HookedLease:
    """A lease whose release runs the backend's release hooks around it."""

    def __init__(self, owner: Hooked, inner: Lease) -> None:
        self._owner = owner
        self._inner = inner
        self._released = False

    @property
    def locked(self) -> bool:
        return self._inner.locked

    def unlock(self) -> None:
        # Like a real lease, a second call still releases: one interrupted
        # inside a hook must not leave the lock held. The hooks run once.
        first = not self._released
        self._released = True
        ordinal = 0
        if first:
            self._owner.releases += 1
            ordinal = self._owner.releases
            hook = self._owner.before_release.pop(ordinal, None)
            if hook is not None:
                hook()
        self._inner.unlock()
        hook = self._owner.after_release.pop(ordinal, None)
        if hook is not None:
            hook()


@final
class Hooked:
    """A real backend with one-shot hooks keyed by call ordinal (from 1).

    Attributes:
        after_probe: run after the n-th ``try_acquire`` returned.
        before_release, after_release: run around the n-th lease release.
        fail_probe: ``try_acquire`` calls (by ordinal) that raise this OSError.
        fail_counter: ``update_counter``/``read_counter`` calls (by ordinal,
            counted together) that raise this OSError.
    """

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.probes = 0
        self.releases = 0
        self.counter_calls = 0
        self.after_probe: dict[int, Callable[[], object]] = {}
        self.before_release: dict[int, Callable[[], object]] = {}
        self.after_release: dict[int, Callable[[], object]] = {}
        self.fail_probe: dict[int, OSError] = {}
        self.fail_counter: dict[int, OSError] = {}

    def try_acquire(self) -> HookedLease | None:
        self.probes += 1
        failure = self.fail_probe.pop(self.probes, None)
        if failure is not None:
            raise failure
        lease = self.inner.try_acquire()
        hook = self.after_probe.pop(self.probes, None)
        if hook is not None:
            hook()
        return None if lease is None else HookedLease(self, lease)

    def _counter_call(self) -> None:
        self.counter_calls += 1
        failure = self.fail_counter.pop(self.counter_calls, None)
        if failure is not None:
            raise failure

    def read_counter(self, lease: Lease | None = None) -> int:
        self._counter_call()
        return self.inner.read_counter(lease._inner if isinstance(lease, HookedLease) else lease)

    def update_counter(self, fn: Change) -> int:
        self._counter_call()
        return self.inner.update_counter(fn)

    def start(
        self,
        lease: Lease,
        change: Change,
        *,
        always: bool = False,
        seen: Callable[[int], None] | None = None,
    ) -> Started:
        """The start of a cycle: one counter call (a failure injected here leaves the
        counter untouched and draws no token)."""
        inner = lease._inner if isinstance(lease, HookedLease) else lease
        try:
            self._counter_call()
        except OSError as exc:
            return 0, OSError(exc.errno, f"no fencing token: {exc.strerror}"), exc
        return self.inner.start(inner, change, always=always, seen=seen)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # fence, afence: the real backend's


def hooked(ex: Exclusive) -> Hooked:
    """Wrap ``ex``'s backend in a :class:`Hooked` one."""
    backend = Hooked(ex._backend)
    ex._backend = backend
    return backend


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m sched_exclusive ARGS`` in a child, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "sched_exclusive", *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )


def asking_for_tokens() -> tuple[Callable[[], None], list[CoordinationError]]:
    """A job that asks for its cycle's fencing token, and the errors it was given."""
    failures: list[CoordinationError] = []

    def job() -> None:
        try:
            fencing_token()
        except CoordinationError as exc:
            failures.append(exc)

    return job, failures


def read_counter_file(directory: str) -> bytes:
    """The raw bytes of ``directory/cycle.queued`` (b"" when absent)."""
    try:
        return Path(directory, "cycle.queued").read_bytes()
    except FileNotFoundError:
        return b""


# The tracer of the interrupt sweeps is the shared one (testing/sched_testing.py).
Interrupter = sched_testing.Interrupter


def library_code(*given: ModuleType) -> frozenset[CodeType]:
    """Every code object defined in ``given`` (`sched_testing.library_code`); the
    PostgreSQL backend (``_postgres``) stands for all the ``_pg*`` modules it is built on."""
    modules = list(given)
    for module in given:
        if module.__name__ == "sched_exclusive._postgres":
            package = Path(module.__file__ or "").parent
            modules += [
                importlib.import_module(f"sched_exclusive.{part.stem}")
                for part in sorted(package.glob("_pg*.py"))
            ]
    return sched_testing.library_code(*modules)
