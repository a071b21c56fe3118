"""Helpers shared by sched-exclusive's tests.

* :class:`Hooked` wraps the real flock backend (real files throughout) and
  runs one-shot callbacks at the step boundaries the coalescing rules care
  about: after a lock probe, before and after a release. That is how a test
  places "another process" exactly in a race window, in one process: another
  holder is a second open of the lock file (:func:`sched_lock.try_lock`),
  another requester is a second :class:`Exclusive` on the same directory.
* :class:`Child` is a Python child process spoken to line by line.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import final

from sched_exclusive import Exclusive
from sched_exclusive._backend import Lease
from sched_exclusive._files import FileBackend

DEADLINE = 30.0
"""A generous upper bound for a child's answer; never the thing under test."""


@final
class HookedLease:
    """A lease whose release runs the backend's release hooks around it."""

    def __init__(self, owner: Hooked, inner: Lease) -> None:
        self._owner = owner
        self._inner = inner
        self._released = False

    def unlock(self) -> None:
        if self._released:
            return
        self._released = True
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
    """The real file backend with one-shot hooks keyed by call ordinal (from 1).

    Attributes:
        after_probe: run after the n-th ``try_acquire`` returned.
        before_release, after_release: run around the n-th lease release.
        fail_probe: ``try_acquire`` calls (by ordinal) that raise this OSError.
        fail_counter: ``update_counter``/``read_counter`` calls (by ordinal,
            counted together) that raise this OSError.
    """

    def __init__(self, directory: str) -> None:
        self.inner = FileBackend(directory)
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

    def read_counter(self) -> int:
        self._counter_call()
        return self.inner.read_counter()

    def update_counter(self, fn: Callable[[int], int]) -> int:
        self._counter_call()
        return self.inner.update_counter(fn)


def hooked(ex: Exclusive) -> Hooked:
    """Swap ``ex``'s backend for a :class:`Hooked` one on the same directory."""
    backend = Hooked(ex.dir)
    ex._backend = backend
    return backend


def read_counter_file(directory: str) -> bytes:
    """The raw bytes of ``directory/cycle.queued`` (b"" when absent)."""
    try:
        return Path(directory, "cycle.queued").read_bytes()
    except FileNotFoundError:
        return b""


@final
class Child:
    """A Python child process talking line by line over its stdin and stdout."""

    def __init__(self, code: str, *args: str, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-u", "-c", code, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self._buffer = b""

    def read_line(self) -> str:
        """Return the child's next line, failing the test past the deadline."""
        stdout = self.process.stdout
        assert stdout is not None
        deadline = time.monotonic() + DEADLINE
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([stdout], [], [], max(deadline - time.monotonic(), 0))
            assert ready, "the child did not answer in time"
            chunk = os.read(stdout.fileno(), 65536)
            assert chunk, f"the child exited early: {self.stderr_text()}"
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def write_line(self, line: str) -> None:
        """Send one line to the child's stdin."""
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(line.encode() + b"\n")
        stdin.flush()

    def stderr_text(self) -> str:
        """What the child wrote to stderr, once it has exited."""
        try:
            self.process.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            return "(still running)"
        assert self.process.stderr is not None
        return self.process.stderr.read().decode()

    def finish(self) -> int:
        """Close stdin, wait for the exit, and return the exit status."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        return self.process.wait(DEADLINE)

    def reap(self) -> None:
        """Kill the child if it still runs, and wait for it (for ``finally``)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(DEADLINE)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
