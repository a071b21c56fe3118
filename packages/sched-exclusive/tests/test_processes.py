"""Real child processes, ordered by handshakes on their stdin and stdout."""

from __future__ import annotations

import errno
import logging
import os
import signal
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sched_exclusive_testkit import Child, read_counter_file

from sched_exclusive import CoordinationError, Exclusive, Outcome

# A holder: each run prints "running N" and waits for a line on stdin.
HOLDER = """
import sys
from sched_exclusive import Exclusive
runs = 0
def job():
    global runs
    runs += 1
    print(f"running {runs}", flush=True)
    sys.stdin.readline()
print(Exclusive(sys.argv[1]).run(job), flush=True)
"""


@pytest.fixture
def directory(tmp_path: Path) -> str:
    return str(tmp_path)


@pytest.fixture
def children() -> Iterator[list[Child]]:
    spawned: list[Child] = []
    yield spawned
    for child in spawned:
        child.reap()


def test_a_request_during_another_process_run_is_served_by_it(
    directory: str, children: list[Child]
) -> None:
    """Queued here while a child runs; the child reruns the job for us after its run."""
    holder = Child(HOLDER, directory)
    children.append(holder)
    assert "running 1" == holder.read_line()
    ex = Exclusive(directory)
    assert Outcome.QUEUED == ex.run(lambda: pytest.fail("must not run here"))
    assert Outcome.DISCARDED == ex.run(lambda: pytest.fail("must not run here"))
    assert Outcome.SKIPPED == ex.run_or_skip(lambda: pytest.fail("must not run here"))
    holder.write_line("")
    assert "running 2" == holder.read_line()  # the rerun we asked for
    holder.write_line("")
    assert "ran-queued" == holder.read_line()
    assert 0 == holder.finish()
    assert 0 == ex.pending()


def test_sigkill_mid_job_never_wedges(
    directory: str, children: list[Child], caplog: pytest.LogCaptureFixture
) -> None:
    """A holder killed mid-job: the next call acquires at once and clears the orphan counter."""
    caplog.set_level(logging.WARNING, "sched_exclusive")
    holder = Child(HOLDER, directory)
    children.append(holder)
    assert "running 1" == holder.read_line()
    ex = Exclusive(directory)
    assert Outcome.QUEUED == ex.run(lambda: None)
    holder.process.send_signal(signal.SIGKILL)
    assert -signal.SIGKILL == holder.process.wait()
    assert b"1\n" == read_counter_file(directory)  # orphaned by the crash
    runs = 0

    def job() -> None:
        nonlocal runs
        runs += 1

    assert Outcome.RAN == ex.run(job)
    assert 1 == runs
    assert b"0\n" == read_counter_file(directory)
    assert ["stale queued-run marker cleared at startup (1 pending)"] == [
        r.getMessage() for r in caplog.records
    ]


def test_python_reads_and_writes_the_go_counter_format(directory: str) -> None:
    """A counter written by the Go library ("2\\n") is read, and we write the same shape."""
    Path(directory, "cycle.queued").write_bytes(b"2\n")
    ex = Exclusive(directory, queue_capacity=3)
    assert 2 == ex.pending()
    seen: list[bytes] = []

    def job() -> None:
        if not seen:
            assert Outcome.QUEUED == Exclusive(directory, queue_capacity=3).run(lambda: None)
            seen.append(read_counter_file(directory))

    assert Outcome.RAN_QUEUED == ex.run(job)
    assert [b"1\n"] == seen  # cleared to "0\n" at acquisition, then one request
    assert b"0\n" == read_counter_file(directory)


# The child drops to an unprivileged user when it runs as root (CI does), so
# that the kernel's refusal is real, then reports what each call did.
READ_ONLY = """
import os, sys
from sched_exclusive import CoordinationError, Exclusive
if os.geteuid() == 0:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
ex = Exclusive(sys.argv[1])
for call in (ex.run, ex.run_or_skip, ex.pending):
    try:
        call(lambda: print("ran", flush=True)) if call != ex.pending else call()
    except CoordinationError as exc:
        print(exc.outcome, exc.errno, exc.filename, flush=True)
"""


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory an unprivileged user can enter but not write (0555 for non-root)."""
    with tempfile.TemporaryDirectory() as name:
        path = Path(name)
        path.chmod(0o755 if os.geteuid() == 0 else 0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)


def test_read_only_empty_directory(shared_dir: Path, children: list[Child]) -> None:
    """Nothing can be created: outcome none with EACCES, and nothing is half-written."""
    child = Child(READ_ONLY, str(shared_dir))
    children.append(child)
    lock = shared_dir / "cycle.lock"
    queue = shared_dir / "cycle.queued"
    assert f"none {errno.EACCES} {lock}" == child.read_line()
    assert f"none {errno.EACCES} {lock}" == child.read_line()
    assert f"none {errno.EACCES} {queue}" == child.read_line()
    assert 0 == child.finish()
    assert [] == list(shared_dir.iterdir())


def test_read_only_files(shared_dir: Path, children: list[Child]) -> None:
    """Existing files the user may not write: outcome none, and their content is untouched."""
    lock = shared_dir / "cycle.lock"
    queue = shared_dir / "cycle.queued"
    lock.write_bytes(b"2026-01-01T00:00:00Z\n")
    queue.write_bytes(b"1\n")
    for path in (lock, queue):
        path.chmod(0o444)
    child = Child(READ_ONLY, str(shared_dir))
    children.append(child)
    assert f"none {errno.EACCES} {lock}" == child.read_line()
    assert f"none {errno.EACCES} {lock}" == child.read_line()
    assert f"none {errno.EACCES} {queue}" == child.read_line()
    assert 0 == child.finish()
    assert (b"2026-01-01T00:00:00Z\n", b"1\n") == (lock.read_bytes(), queue.read_bytes())
    assert stat.S_IMODE(queue.stat().st_mode) == 0o444


def test_coordination_error_is_an_os_error(tmp_path: Path) -> None:
    """The missing-directory error is caught by ``except OSError`` and names the path."""
    with pytest.raises(OSError, match=r"cycle\.lock") as caught:
        Exclusive(tmp_path / "nope").run(lambda: None)
    assert isinstance(caught.value, CoordinationError)
