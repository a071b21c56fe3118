"""Fixtures for sched-lock's tests: child processes and descriptor-leak checks."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sched_testing import Child, fd_targets


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


@pytest.fixture(autouse=True)
def _no_descriptor_leak() -> Iterator[None]:
    """Fail a test that leaves a descriptor open (compares /proc/self/fd)."""
    if not Path("/proc/self/fd").is_dir():  # macOS
        yield
        return
    before = fd_targets()
    yield
    after = fd_targets()
    assert {} == {fd: target for fd, target in after.items() if before.get(fd) != target}
