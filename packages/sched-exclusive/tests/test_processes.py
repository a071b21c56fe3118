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
from sched_exclusive_testkit import read_counter_file
from sched_testing import Child

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
    (tmp_path / "nope").mkdir()
    exclusive = Exclusive(tmp_path / "nope")
    (tmp_path / "nope").rmdir()
    with pytest.raises(OSError, match=r"cycle\.lock") as caught:
        exclusive.run(lambda: None)
    assert isinstance(caught.value, CoordinationError)


# A holder whose first run forks. The forked child either ends with sys.exit()
# (unwinding through its copy of the holder's stack, as the daemonize recipe
# does) or returns from the job (carrying on in the caller's code); the
# holder waits for it, says so, and waits again.
FORKING_HOLDER = """
import os, sys
from sched_exclusive import Exclusive
holder = os.getpid()
runs = []
def job():
    runs.append(os.getpid())
    if len(runs) == 1:
        print("running", flush=True)
        mode = sys.stdin.readline().strip()
        pid = os.fork()
        if pid == 0:
            if mode == "exit":
                sys.exit(0)
            return
        _, status = os.waitpid(pid, 0)
        print("forked child exited", os.waitstatus_to_exitcode(status), flush=True)
        sys.stdin.readline()
outcome = Exclusive(sys.argv[1]).run(job)
if os.getpid() != holder:
    print("forked child", outcome, len(runs), flush=True)
    os._exit(0)
print(outcome, len(runs), flush=True)
"""


@pytest.mark.parametrize("mode", ["exit", "return"])
def test_a_forked_child_never_releases_the_lock_nor_touches_the_counter(
    directory: str, children: list[Child], mode: str
) -> None:
    """A job that forks: the child, whether it ends with sys.exit() or returns from the
    job, leaves the lock and the queued demand to the holder. No other process can start
    a run meanwhile, and the holder serves the request queued before the fork."""
    holder = Child(FORKING_HOLDER, directory)
    children.append(holder)
    assert "running" == holder.read_line()
    ex = Exclusive(directory)
    assert Outcome.QUEUED == ex.run(lambda: pytest.fail("must not run here"))
    holder.write_line(mode)
    if mode == "return":
        assert "forked child ran 1" == holder.read_line()  # no rerun in the child
    assert "forked child exited 0" == holder.read_line()
    assert Outcome.SKIPPED == ex.run_or_skip(lambda: pytest.fail("must not run here"))
    assert 1 == ex.pending()  # still queued, for the holder
    holder.write_line("")
    assert "ran-queued 2" == holder.read_line()
    assert 0 == holder.finish()
    assert 0 == ex.pending()


POOL_HOLDER = """
import multiprocessing, sys
from sched_exclusive import Exclusive
def job():
    with multiprocessing.get_context("fork").Pool(2) as pool:
        squares = pool.map(abs, [-2, -3, -4])
    print("pool done", squares, flush=True)
    sys.stdin.readline()
print(Exclusive(sys.argv[1]).run(job), flush=True)
"""


def test_a_fork_pool_inside_the_job_keeps_the_lock(directory: str, children: list[Child]) -> None:
    """A multiprocessing fork pool used inside the job (its workers are forked from the
    holder) leaves the lock held by the holder until the job ends."""
    holder = Child(POOL_HOLDER, directory)
    children.append(holder)
    assert "pool done [2, 3, 4]" == holder.read_line()
    ex = Exclusive(directory)
    assert Outcome.SKIPPED == ex.run_or_skip(lambda: pytest.fail("must not run here"))
    holder.write_line("")
    assert "ran" == holder.read_line()
    assert 0 == holder.finish()
    assert Outcome.RAN == ex.run_or_skip(lambda: None)
