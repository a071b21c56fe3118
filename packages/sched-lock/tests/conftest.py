"""Fixtures for sched-lock's tests: child processes and descriptor-leak checks."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import final

import pytest

DEADLINE = 30.0
"""A generous upper bound for a child's answer; never the thing under test."""


@final
class Child:
    """A Python child process talking line by line over its stdin and stdout."""

    def __init__(self, code: str, *, close_fds: bool = True) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-u", "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=close_fds,
        )
        self._buffer = b""

    def read_line(self) -> str:
        """Return the child's next line, failing the test past the deadline.

        Lines the child wrote together are kept in our own buffer: a buffered
        reader would swallow the second one, and select() would then wait
        for data that already came.
        """
        stdout = self.process.stdout
        assert stdout is not None
        deadline = time.monotonic() + DEADLINE
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([stdout], [], [], max(deadline - time.monotonic(), 0))
            assert ready, "the child did not answer in time"
            chunk = os.read(stdout.fileno(), 65536)
            assert chunk, "the child exited before answering"
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def send(self, line: str) -> None:
        """Write one line to the child's stdin."""
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(line.encode() + b"\n")
        stdin.flush()

    def wait(self) -> int:
        """Wait for the child to exit and return its exit status."""
        return self.process.wait(DEADLINE)

    def reap(self) -> None:
        """Kill the child if it still runs, wait for it, close the pipes."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(DEADLINE)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def spawn() -> Iterator[Callable[..., Child]]:
    """Start children with ``spawn(code)``; every one is reaped at teardown."""
    children: list[Child] = []

    def start(code: str, *, close_fds: bool = True) -> Child:
        child = Child(code, close_fds=close_fds)
        children.append(child)
        return child

    try:
        yield start
    finally:
        for child in children:
            child.reap()


@pytest.fixture
def drop_privileges() -> str:
    """Code for a child to run before acting without privileges.

    CI runs as root, for whom permission bits refuse nothing, so a child drops
    to nobody (65534). Do the imports first: the interpreter may live under a
    directory an unprivileged user cannot read.
    """
    return (
        "import os\n"
        "if os.geteuid() == 0:\n"
        "    os.setgroups([])\n"
        "    os.setgid(65534)\n"
        "    os.setuid(65534)\n"
    )


@pytest.fixture
def world_dir() -> Iterator[str]:
    """A fresh directory (mode 0755) that an unprivileged child can traverse.

    pytest's ``tmp_path`` lives under a 0700 directory, which would refuse an
    unprivileged child for the wrong reason.
    """
    path = tempfile.mkdtemp(prefix="sched-lock-")
    Path(path).chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def open_fds() -> dict[str, str]:
    """This process's open descriptors and what they point at."""
    fds: dict[str, str] = {}
    for entry in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(FileNotFoundError):  # the directory's own descriptor
            fds[entry.name] = str(entry.readlink())
    return fds


@pytest.fixture(autouse=True)
def _no_descriptor_leak() -> Iterator[None]:
    """Fail a test that leaves a descriptor open (compares /proc/self/fd)."""
    if not Path("/proc/self/fd").is_dir():  # macOS
        yield
        return
    before = open_fds()
    yield
    after = open_fds()
    assert {} == {fd: target for fd, target in after.items() if before.get(fd) != target}
