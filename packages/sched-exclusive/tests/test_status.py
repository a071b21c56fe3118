"""The operator CLI: ``python -m sched_exclusive status DIR [--json]``."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sched_exclusive_testkit import cli
from sched_testing import Child

from sched_exclusive import Exclusive, Outcome
from sched_exclusive.__main__ import main
from sched_exclusive._status import format_rfc3339, format_seconds, lock_holders, status
from sched_lock import try_lock

HOLDER = """
import sys
from sched_exclusive import Exclusive
def job():
    print("running", flush=True)
    sys.stdin.readline()
print(Exclusive(sys.argv[1]).run(job), flush=True)
"""

# Runs the CLI with an audit hook that records every flock(2) and every open
# of cycle.lock, to prove the status command never takes the cycle lock.
AUDITED = """
import json, sys
seen = []
def hook(event, args):
    if event == "fcntl.flock":
        seen.append(["flock", args[1]])
    elif event == "open" and str(args[0]).endswith("cycle.lock"):
        seen.append(["open-lock", args[2]])
sys.addaudithook(hook)
from sched_exclusive.__main__ import main
code = main(["status", sys.argv[1], "--json"])
print(json.dumps(seen), file=sys.stderr)
sys.exit(code)
"""


def test_idle_directory_is_idle_and_untouched(tmp_path: Path) -> None:
    """A fresh directory is idle with nothing queued, and the CLI creates no file."""
    done = cli("status", str(tmp_path))
    assert (0, f"{tmp_path}: idle; 0 queued requests\n") == (done.returncode, done.stdout)
    assert [] == list(tmp_path.iterdir())


def test_running_holder_is_reported_without_taking_the_lock(
    tmp_path: Path, children: list[Child]
) -> None:
    """While another process runs a cycle: running, its pid, since when, the queue."""
    holder = Child(HOLDER, str(tmp_path))
    children.append(holder)
    assert "running" == holder.read_line()
    assert Outcome.QUEUED == Exclusive(tmp_path).run(lambda: None)
    done = subprocess.run(
        [sys.executable, "-c", AUDITED, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    report = json.loads(done.stdout)
    assert ("running", 1, [holder.process.pid]) == (
        report["state"],
        report["pending"],
        report["holder_pids"],
    )
    since = datetime.fromisoformat(report["since"])
    assert abs((datetime.now(UTC) - since).total_seconds()) < 600
    assert report["running_for"].endswith("s")
    # Only shared flocks (the counter's); the lock file opened read-only, never created.
    events = json.loads(done.stderr)
    assert [fcntl.LOCK_SH | fcntl.LOCK_NB] == [arg for kind, arg in events if kind == "flock"]
    lock_opens = [arg for kind, arg in events if kind == "open-lock"]
    assert lock_opens, "the holder line is read"
    assert all(flags & (os.O_ACCMODE | os.O_CREAT) == os.O_RDONLY for flags in lock_opens)
    text = cli("status", str(tmp_path)).stdout
    assert text.startswith(f"{tmp_path}: running since ")
    assert text.endswith(f", pid {holder.process.pid}; 1 queued request\n")
    holder.write_line("")
    assert "running" == holder.read_line()  # the queued rerun
    holder.write_line("")
    assert "ran-queued" == holder.read_line()
    report = json.loads(cli("status", str(tmp_path), "--json").stdout)
    assert ("idle", 0, None) == (report["state"], report["pending"], report["running_for"])


def test_missing_directory_fails(tmp_path: Path) -> None:
    """A missing directory: exit status 1 and a message naming it."""
    done = cli("status", str(tmp_path / "nope"))
    assert 1 == done.returncode
    assert str(tmp_path / "nope") in done.stderr


def test_not_a_directory_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file where the directory should be: exit status 1."""
    (tmp_path / "file").write_text("")
    assert 1 == main(["status", str(tmp_path / "file")])
    assert "not a directory" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """No command is a usage error."""
    with pytest.raises(SystemExit) as caught:
        main([])
    assert 2 == caught.value.code
    capsys.readouterr()


def test_garbage_files_read_as_unknown_and_zero(tmp_path: Path) -> None:
    """Garbage holder and counter files: no start time, zero pending, no error."""
    (tmp_path / "cycle.lock").write_bytes(b"\xff garbage")
    (tmp_path / "cycle.queued").write_bytes(b"-7\n")
    snapshot = status(str(tmp_path))
    assert ("idle", None, 0) == (snapshot.state, snapshot.since, snapshot.pending)


def test_a_directory_as_cycle_lock_reads_as_unknown_age(tmp_path: Path) -> None:
    """A directory in place of cycle.lock: the report says the holder age is unknown and
    why, instead of failing (read_holder never raises)."""
    (tmp_path / "cycle.lock").mkdir()
    done = cli("status", str(tmp_path))
    assert (0, f"{tmp_path}: idle; 0 queued requests\n") == (done.returncode, done.stdout)
    assert (
        f"python -m sched_exclusive status: note: {tmp_path}/cycle.lock is a directory, "
        "not a regular file: the holder age is unknown\n"
    ) == done.stderr


def test_a_fifo_as_cycle_lock_never_blocks(tmp_path: Path) -> None:
    """A FIFO in place of cycle.lock: answered at once (no wait for a writer), the holder
    age unknown, with a note saying why."""
    os.mkfifo(tmp_path / "cycle.lock")
    done = cli("status", str(tmp_path), "--json")
    assert 0 == done.returncode
    assert (None, "idle") == (json.loads(done.stdout)["since"], json.loads(done.stdout)["state"])
    assert "cycle.lock is a FIFO, not a regular file: the holder age is unknown" in done.stderr


def test_a_fifo_as_cycle_queued_is_a_clear_error(tmp_path: Path) -> None:
    """A FIFO in place of cycle.queued: a clear message and exit status 1, at once,
    instead of hanging for a writer."""
    os.mkfifo(tmp_path / "cycle.queued")
    done = cli("status", str(tmp_path))
    assert (1, "") == (done.returncode, done.stdout)
    assert (
        f"python -m sched_exclusive status: {tmp_path}/cycle.queued is a FIFO, "
        "not a regular file: Exclusive cannot use it as its counter\n"
    ) == done.stderr


@pytest.mark.parametrize("kind", ["a directory", "a socket"])
def test_other_non_regular_counters_are_clear_errors(tmp_path: Path, kind: str) -> None:
    """A directory or a socket in place of cycle.queued: a clear message, exit status 1."""
    counter = tmp_path / "cycle.queued"
    with socket.socket(socket.AF_UNIX) as server:
        if kind == "a socket":
            server.bind(str(counter))
        else:
            counter.mkdir()
        done = cli("status", str(tmp_path))
    assert 1 == done.returncode
    assert f"{counter} is {kind}, not a regular file" in done.stderr


def test_a_stuck_counter_transaction_is_reported(tmp_path: Path, children: list[Child]) -> None:
    """A process stuck inside a counter transaction (it holds the counter's flock and
    never lets go): status reports it after a bounded wait instead of blocking."""
    counter = tmp_path / "cycle.queued"
    counter.write_bytes(b"1\n")
    code = f"""
import fcntl, os, sys
fd = os.open({str(counter)!r}, os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
"""
    stuck = Child(code)
    children.append(stuck)
    assert "locked" == stuck.read_line()
    done = cli("status", str(tmp_path))
    assert (1, "") == (done.returncode, done.stdout)
    assert (
        f"python -m sched_exclusive status: {counter} stayed locked for a second by a counter "
        "transaction that does not end (a stopped process?)\n"
    ) == done.stderr
    stuck.write_line("")
    assert 0 == stuck.finish()
    assert f"{tmp_path}: idle; 1 queued request\n" == cli("status", str(tmp_path)).stdout


@pytest.mark.parametrize("number", [errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES])
def test_the_counter_probe_classifies_contention_as_sched_lock_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, number: int
) -> None:
    """Every errno sched-lock calls contention (EACCES too, which some systems give
    for a held flock) is waited out, not reported as a failure; others fail at once.
    (Linux's flock only gives EWOULDBLOCK, so the first answer is stood in for.)"""
    from sched_exclusive import _status

    (tmp_path / "cycle.queued").write_bytes(b"2\n")
    answers = [OSError(number, os.strerror(number))]
    real = fcntl.flock

    def flock(fd: int, operation: int) -> None:
        if answers:
            raise answers.pop()
        real(fd, operation)

    monkeypatch.setattr(_status, "_flock", flock)
    assert 2 == status(str(tmp_path)).pending
    answers.append(OSError(errno.ENOLCK, os.strerror(errno.ENOLCK)))
    with pytest.raises(OSError, match="No locks available") as caught:
        status(str(tmp_path))
    assert errno.ENOLCK == caught.value.errno


LOCKS = """1: POSIX  ADVISORY  WRITE 10 fe:00:{ino} 0 EOF
2: FLOCK  ADVISORY  READ  11 fe:00:{ino} 0 EOF
3: FLOCK  ADVISORY  WRITE 12 fe:01:{ino} 0 EOF
4: FLOCK  ADVISORY  WRITE {pid} {major:02x}:{minor:02x}:{ino} 0 EOF
4: -> FLOCK  ADVISORY  WRITE 13 {major:02x}:{minor:02x}:{ino} 0 EOF
garbage line
5: FLOCK  ADVISORY  WRITE x {major:02x}:{minor:02x}:{ino} 0 EOF
"""


@pytest.mark.parametrize(("pid", "expected"), [(1234, (1234,)), (0, (0,))])
def test_lock_table_parsing(tmp_path: Path, pid: int, expected: tuple[int, ...]) -> None:
    """Only a granted FLOCK WRITE on the file's device and inode counts; waiters do not."""
    lock = tmp_path / "cycle.lock"
    lock.write_text("")
    st_ = lock.stat()
    table = tmp_path / "locks"
    table.write_text(
        LOCKS.format(
            ino=st_.st_ino, pid=pid, major=os.major(st_.st_dev), minor=os.minor(st_.st_dev)
        )
    )
    assert expected == lock_holders(str(lock), str(table))
    table.write_text("")
    assert () == lock_holders(str(lock), str(table))
    assert lock_holders(str(lock), str(tmp_path / "absent")) is None


def test_unknown_without_a_lock_table(tmp_path: Path) -> None:
    """Where there is no /proc/locks (macOS), the state is "unknown", the rest still shown."""
    (tmp_path / "cycle.queued").write_bytes(b"1\n")
    (tmp_path / "cycle.lock").write_bytes(b"")
    snapshot = status(str(tmp_path), table=str(tmp_path / "absent"))
    assert ("unknown", 1) == (snapshot.state, snapshot.pending)
    assert f"{tmp_path}: unknown; 1 queued request" == snapshot.describe()


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59, "59s"), (60, "1m0s"), (83, "1m23s"), (3600, "1h0m0s"), (90061, "25h1m1s")],
)
def test_durations_read_as_go_prints_them(seconds: int, text: str) -> None:
    """Running times print as Go's Duration.String of whole seconds."""
    assert text == format_seconds(seconds)


@given(st.datetimes(timezones=st.just(UTC)))
def test_rfc3339_round_trips(instant: datetime) -> None:
    """The "since" timestamp is RFC 3339 with Z, and parses back to the same instant."""
    text = format_rfc3339(instant)
    assert text.endswith("Z")
    assert instant == datetime.fromisoformat(text)


def test_in_process_report_of_a_held_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lock held by this very process (a second open) shows as running, with our pid."""
    lock = try_lock(tmp_path / "cycle.lock")
    assert lock
    try:
        assert 0 == main(["status", str(tmp_path), "--json"])
        report = json.loads(capsys.readouterr().out)
        assert ("running", [os.getpid()], 0) == (
            report["state"],
            report["holder_pids"],
            report["pending"],
        )
        assert 0 == main(["status", str(tmp_path)])
        text = capsys.readouterr().out
        assert text.startswith(f"{tmp_path}: running since ")
        assert text.endswith(f"s), pid {os.getpid()}; 0 queued requests\n")
    finally:
        lock.unlock()
    assert 0 == main(["status", str(tmp_path)])
    assert capsys.readouterr().out.startswith(f"{tmp_path}: idle (last cycle started ")


@pytest.fixture
def btrfs_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory on a freshly made btrfs (a loop mount), where ``stat`` reports the
    subvolume's device while ``/proc/locks`` names the file system's. Needs root,
    ``mkfs.btrfs`` and loop devices; skipped where any of them is missing."""
    import shutil

    mkfs = shutil.which("mkfs.btrfs")
    if os.geteuid() != 0 or mkfs is None or not Path("/dev/loop-control").exists():
        pytest.skip("needs root, mkfs.btrfs and loop devices")
    image = tmp_path / "btrfs.img"
    with image.open("wb") as f:
        f.truncate(128 * 1024 * 1024)
    subprocess.run([mkfs, "-q", str(image)], check=True, capture_output=True, timeout=60)
    mount_point = tmp_path / "mnt"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-o", "loop", str(image), str(mount_point)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a loop device here: {mounted.stderr!r}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True, timeout=60)


def test_a_held_lock_on_btrfs_shows_as_running(btrfs_dir: Path) -> None:
    """On btrfs (Synology, Fedora, openSUSE hosts) a held cycle lock is reported as
    running: the lock table's device number is the file system's, not stat's."""
    lock = try_lock(btrfs_dir / "cycle.lock")
    assert lock
    try:
        snapshot = status(str(btrfs_dir))
        assert ("running", (os.getpid(),)) == (snapshot.state, snapshot.holder_pids)
    finally:
        lock.unlock()
    assert "idle" == status(str(btrfs_dir)).state


def test_both_backends_render_through_one_renderer() -> None:
    """A directory's snapshot and a PostgreSQL name's print the same line and the same
    JSON shape, apart from what names the job and who holds it; a PostgreSQL name whose
    last holder is unknown says nothing of it (it printed "on )")."""
    pytest.importorskip("psycopg")
    from sched_exclusive._pgstatus import PostgresStatus
    from sched_exclusive._status import Status

    since = datetime(2026, 12, 2, 13, 5, 9, 500000, tzinfo=UTC)
    flock = Status("/config", "running", since, 124, (7,), 1)
    pg = PostgresStatus("nightly", "running", since, 124, "web-7f9c", 7, 4242, 1)
    when = "running since 2026-12-02T13:05:09.5Z (for 2m4s)"
    assert f"/config: {when}, pid 7; 1 queued request" == flock.describe()
    assert f"nightly: {when}, host web-7f9c, pid 7; 1 queued request" == pg.describe()
    shared = {"state", "since", "running_for", "running_for_seconds", "pending"}
    assert shared == flock.as_json().keys() - {"dir", "holder_pids"}
    assert shared == pg.as_json().keys() - {"name", "host", "pid", "backend_pid"}
    assert {k: flock.as_json()[k] for k in shared} == {k: pg.as_json()[k] for k in shared}
    unknown = PostgresStatus("nightly", "idle", since, None, None, None, None, 0)
    assert "nightly: idle (last cycle started 2026-12-02T13:05:09.5Z); 0 queued requests" == (
        unknown.describe()
    )


@given(
    state=st.sampled_from(["running", "idle", "unknown"]),
    since=st.none() | st.datetimes(timezones=st.just(UTC)),
    running_for=st.none() | st.integers(0, 10**7),
    pending=st.integers(0, 10**6),
)
def test_the_renderer_speaks_alike_for_both_backends(
    state: str, since: datetime | None, running_for: int | None, pending: int
) -> None:
    """With no holder to name, a directory's line and a PostgreSQL name's are the same
    line but for the label, and their JSON objects agree on every shared field."""
    pytest.importorskip("psycopg")
    from sched_exclusive._pgstatus import PostgresStatus
    from sched_exclusive._status import Status

    flock = Status("L", state, since, running_for, (), pending)
    pg = PostgresStatus("L", state, since, running_for, None, None, None, pending)
    assert flock.describe() == pg.describe()
    shared = flock.as_json().keys() & pg.as_json().keys()
    assert {"state", "since", "running_for", "running_for_seconds", "pending"} == shared
    assert {k: flock.as_json()[k] for k in shared} == {k: pg.as_json()[k] for k in shared}
