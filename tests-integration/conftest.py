"""Helpers shared by the cross-package tests: real child processes, read line by line.

Every concurrent step is ordered by a handshake: a test waits for the line
that proves the previous step happened (a log line, a "ready" from a child)
before it acts, and the deadlines below are generous upper bounds that only
matter when something is broken.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from sched_testing import socket_dir

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"
JOBRUNNER = EXAMPLES / "jobrunner.py"

#: Upper bound for one step of a cross-process test; steps take milliseconds.
DEADLINE = 30.0


class Child:
    """A child process whose merged stdout and stderr are read line by line in a thread."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.popen = subprocess.Popen(
            list(args),
            env=dict(os.environ if env is None else env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            self._queue.put(raw.rstrip("\n"))
        self._queue.put(None)

    def expect(self, pattern: str) -> re.Match[str]:
        """Return the match of the next line matching *pattern*; earlier lines are kept."""
        while True:
            try:
                line = self._queue.get(timeout=DEADLINE)
            except queue.Empty:
                pytest.fail(f"no line matching {pattern!r} within {DEADLINE}s: {self.lines}")
            if line is None:
                self._queue.put(None)
                pytest.fail(f"process ended before a line matching {pattern!r}: {self.lines}")
            self.lines.append(line)
            match = re.search(pattern, line)
            if match:
                return match

    def wait(self, timeout: float = DEADLINE) -> int:
        """Wait for the exit status, then collect the remaining output into ``lines``."""
        code = self.popen.wait(timeout=timeout)
        self._reader.join(timeout=DEADLINE)
        while (line := self._queue.get(timeout=DEADLINE)) is not None:
            self.lines.append(line)
        self._queue.put(None)
        return code

    def output(self) -> str:
        """Every line read so far, joined."""
        return "\n".join(self.lines)

    def terminate(self) -> None:
        """Send SIGTERM, as ``docker stop`` does."""
        self.popen.send_signal(signal.SIGTERM)

    def reap(self) -> None:
        """Kill (if still running) and reap."""
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()
        if self.popen.stdout is not None:
            self._reader.join(timeout=DEADLINE)
            self.popen.stdout.close()


class Children:
    """Starts children and reaps every one of them at the end of the test."""

    def __init__(self) -> None:
        self._started: list[Child] = []

    def start(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Child:
        """Start a child process."""
        child = Child(args, env=env, cwd=cwd)
        self._started.append(child)
        return child

    def python(self, code: str, *, env: Mapping[str, str] | None = None) -> Child:
        """Start ``python -u -c code``."""
        return self.start([sys.executable, "-u", "-c", code], env=env)

    def jobrunner(self, *args: str, env: Mapping[str, str]) -> Child:
        """Start the example job runner."""
        return self.start([sys.executable, "-u", str(JOBRUNNER), *args], env=env)

    def reap_all(self) -> None:
        """Reap every child started so far."""
        for child in self._started:
            child.reap()


@pytest.fixture
def children() -> Iterator[Children]:
    """Start child processes; every one is reaped when the test ends."""
    started = Children()
    try:
        yield started
    finally:
        started.reap_all()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary directory with a short path (unix socket paths are limited to ~100 bytes)."""
    with socket_dir(prefix="sched-it-") as tmp:
        yield Path(tmp)


class Hold:
    """A FIFO a command blocks on until released: keeps a run in flight on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        os.mkfifo(path)

    def release(self) -> None:
        """Let the command waiting on the FIFO finish (bounded; fails the test if none waits)."""
        done = threading.Event()

        def write() -> None:
            with self.path.open("w", encoding="utf-8") as fifo:
                fifo.write("go\n")
            done.set()

        threading.Thread(target=write, daemon=True).start()
        if not done.wait(DEADLINE):
            # Unblock the writer thread so it does not linger, then fail.
            os.close(os.open(self.path, os.O_RDONLY | os.O_NONBLOCK))
            pytest.fail("no command was waiting on the hold FIFO")


@pytest.fixture
def hold(short_tmp: Path) -> Hold:
    """A hold FIFO in the test's temporary directory."""
    return Hold(short_tmp / "hold.fifo")


@pytest.fixture
def runner_env(short_tmp: Path) -> dict[str, str]:
    """The example job runner's environment, with its state and socket under *short_tmp*."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("JOB_", "WORK_"))}
    return {
        **inherited,
        "JOB_STATE_DIR": str(short_tmp / "state"),
        "JOB_SOCKET": str(short_tmp / "trigger.sock"),
        "PYTHONUNBUFFERED": "1",
    }
