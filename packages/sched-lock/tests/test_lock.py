"""try_lock and Lock: flock semantics, the holder line, errors, descriptors."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import logging
import os
import pickle
import re
import signal
import stat
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sched_lock import Lock, LockError, read_holder, try_lock

# A child process (conftest.Child) started by the spawn fixture.
Spawn = Callable[..., Any]

HOLDER_LINE = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{0,8}[1-9])?Z\n")


@pytest.fixture
def lock_path(tmp_path: Path) -> str:
    """A path for a lock file that does not exist yet."""
    return str(tmp_path / "cycle.lock")


@pytest.fixture
def umask_022() -> Iterator[None]:
    """Run the test under the common umask 022, then restore the old one."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def must_lock(path: str | os.PathLike[str], **kwargs: bool) -> Lock:
    """try_lock that must succeed."""
    lock = try_lock(path, **kwargs)
    assert lock, lock
    return lock


@pytest.mark.usefixtures("umask_022")
def test_creates_the_file_0644(lock_path: str) -> None:
    """An absent lock file is created as a regular file with mode 0644."""
    with must_lock(lock_path):
        mode = Path(lock_path).stat().st_mode
    assert stat.S_ISREG(mode)
    assert 0o644 == stat.S_IMODE(mode)


def test_umask_narrows_the_mode(lock_path: str) -> None:
    """The mode is 0644 less the umask (no fchmod overrides the administrator)."""
    old = os.umask(0o077)
    try:
        must_lock(lock_path).unlock()
    finally:
        os.umask(old)
    assert 0o600 == stat.S_IMODE(Path(lock_path).stat().st_mode)


def test_second_open_in_process_contends(lock_path: str) -> None:
    """flock belongs to the open file description: a second open in-process is refused."""
    lock = must_lock(lock_path)
    try:
        assert try_lock(lock_path).busy
        assert try_lock(Path(lock_path)).busy
    finally:
        lock.unlock()
    must_lock(lock_path).unlock()


def test_unlock_is_idempotent_and_keeps_the_file(lock_path: str) -> None:
    """unlock() twice is harmless, and the file (same inode) stays on disk."""
    lock = must_lock(lock_path)
    inode = Path(lock_path).stat().st_ino
    states = [lock.locked]
    lock.unlock()
    lock.unlock()
    states.append(lock.locked)
    assert [True, False] == states
    assert inode == Path(lock_path).stat().st_ino
    with must_lock(lock_path):
        assert inode == Path(lock_path).stat().st_ino


def test_context_manager_returns_self_and_releases(lock_path: str) -> None:
    """``with`` yields the lock itself and releases it on exit, even on error."""
    lock = must_lock(lock_path)

    def fail_inside() -> None:
        with lock as entered:
            assert lock is entered
            raise RuntimeError

    with pytest.raises(RuntimeError):
        fail_inside()
    assert not lock.locked
    must_lock(lock_path).unlock()


def test_path_and_repr(lock_path: str) -> None:
    """``path`` is the given path as a str; repr shows it and the state."""
    lock = must_lock(Path(lock_path))
    assert lock_path == lock.path
    assert f"<sched_lock.Lock {lock_path!r} locked>" == repr(lock)
    lock.unlock()
    assert f"<sched_lock.Lock {lock_path!r} unlocked>" == repr(lock)


def test_lock_cannot_be_constructed() -> None:
    """Locks come from try_lock only."""
    with pytest.raises(TypeError, match="try_lock"):
        Lock()


def test_garbage_collected_lock_is_released_with_a_warning(lock_path: str) -> None:
    """A held lock dropped without unlock() is released, with a ResourceWarning."""

    def drop() -> None:
        must_lock(lock_path)
        gc.collect()

    with pytest.warns(ResourceWarning, match="unreleased lock"):
        drop()
    must_lock(lock_path).unlock()


def test_holder_line_is_written_and_read_back(lock_path: str) -> None:
    """The holder writes one RFC3339Nano UTC line with the acquisition time."""
    start = datetime.now(UTC)
    with must_lock(lock_path):
        content = Path(lock_path).read_bytes()
        since = read_holder(lock_path)
    assert HOLDER_LINE.fullmatch(content), content
    assert since is not None
    assert start - timedelta(microseconds=1) <= since <= datetime.now(UTC)


@pytest.mark.parametrize(
    "previous",
    [
        b"",
        b"x",
        b"2026-12-02T14:00:00.123456789+02:00\n",  # a Go holder's line, with an offset
        b"2026-12-02T12:00:00Z\n" + b" " * 100 + b"garbage\n",
    ],
)
def test_holder_line_fully_replaces_previous_content(lock_path: str, previous: bytes) -> None:
    """Whatever the file held, a new holder leaves exactly its own line."""
    Path(lock_path).write_bytes(previous)
    with must_lock(lock_path):
        content = Path(lock_path).read_bytes()
    assert HOLDER_LINE.fullmatch(content), content


def test_contender_never_writes(lock_path: str) -> None:
    """A refused try_lock neither truncates nor rewrites the holder's line."""
    with must_lock(lock_path):
        Path(lock_path).write_bytes(b"2000-01-01T00:00:00Z\n")
        os.utime(lock_path, ns=(0, 0))
        assert try_lock(lock_path).busy
        assert b"2000-01-01T00:00:00Z\n" == Path(lock_path).read_bytes()
        assert 0 == Path(lock_path).stat().st_mtime_ns


class Spy:
    """Records the order of the write calls while letting them through."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: object) -> None:
        self.calls: list[tuple[str, int]] = []
        real_pwrite: Callable[[int, bytes, int], int] = os.pwrite
        real_ftruncate: Callable[[int, int], None] = os.ftruncate

        def pwrite(fd: int, data: bytes, offset: int) -> int:
            self.calls.append(("pwrite", offset))
            return real_pwrite(fd, data, offset)

        def ftruncate(fd: int, length: int) -> None:
            self.calls.append(("ftruncate", length))
            real_ftruncate(fd, length)

        monkeypatch.setattr(module, "_pwrite", pwrite)
        monkeypatch.setattr(module, "_ftruncate", ftruncate)


def test_holder_line_is_written_before_cutting(
    lock_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Write in place, then cut to length: never the truncate-to-zero pattern."""
    from sched_lock import _flock

    spy = Spy(monkeypatch, _flock)
    Path(lock_path).write_bytes(b"x" * 100)
    with must_lock(lock_path):
        length = len(Path(lock_path).read_bytes())
    assert [("pwrite", 0), ("ftruncate", length)] == spy.calls


def test_missing_directory_raises_file_not_found(tmp_path: Path) -> None:
    """A missing parent directory is a FileNotFoundError (and a LockError) naming the path."""
    path = str(tmp_path / "absent" / "cycle.lock")
    with pytest.raises(FileNotFoundError) as info:
        try_lock(path)
    assert isinstance(info.value, LockError)
    assert errno.ENOENT == info.value.errno
    assert path == info.value.filename


def test_directory_raises_is_a_directory(tmp_path: Path) -> None:
    """A directory at the path is refused with IsADirectoryError."""
    with pytest.raises(IsADirectoryError) as info:
        try_lock(tmp_path)
    assert isinstance(info.value, LockError)
    assert str(tmp_path) == info.value.filename


def test_symlink_refused_without_follow(tmp_path: Path) -> None:
    """follow_symlinks=False refuses a symlink (ELOOP) and leaves its target alone."""
    target = tmp_path / "target"
    target.write_bytes(b"precious")
    link = tmp_path / "cycle.lock"
    link.symlink_to(target)
    with pytest.raises(LockError) as info:
        try_lock(link, follow_symlinks=False)
    assert errno.ELOOP == info.value.errno
    assert str(link) == info.value.filename
    assert b"precious" == target.read_bytes()


def test_symlink_followed_by_default(tmp_path: Path) -> None:
    """By default, as in Go, a symlink is followed and its target locked."""
    target = tmp_path / "target"
    link = tmp_path / "cycle.lock"
    link.symlink_to(target)
    with must_lock(link):
        assert try_lock(target).busy
    assert HOLDER_LINE.fullmatch(target.read_bytes())


def test_no_follow_still_locks_regular_files(lock_path: str) -> None:
    """follow_symlinks=False locks a regular file as usual."""
    with must_lock(lock_path, follow_symlinks=False):
        assert try_lock(lock_path, follow_symlinks=False).busy


def test_errors_pickle(tmp_path: Path) -> None:
    """Errors survive pickling (they may cross a process boundary)."""
    with pytest.raises(LockError) as info:
        try_lock(tmp_path / "absent" / "x")
    copy = pickle.loads(pickle.dumps(info.value))
    assert type(info.value) is type(copy)
    assert (info.value.errno, info.value.filename) == (copy.errno, copy.filename)
    assert str(info.value) == str(copy)


def test_many_operations_leak_no_descriptor(lock_path: str, tmp_path: Path) -> None:
    """Acquire, contend, fail and release repeatedly: /proc/self/fd is unchanged."""
    before = sorted(entry.name for entry in Path("/proc/self/fd").iterdir())
    for _ in range(50):
        with must_lock(lock_path):
            assert try_lock(lock_path).busy
        with pytest.raises(FileNotFoundError):
            try_lock(tmp_path / "absent" / "x")
    assert before == sorted(entry.name for entry in Path("/proc/self/fd").iterdir())


HOLD = """
import sys
from sched_lock import try_lock
lock = try_lock(sys.argv[1] if len(sys.argv) > 1 else {path!r})
print("held" if lock else "busy")
sys.stdin.readline()
"""


def test_cross_process_contention(lock_path: str, spawn: Spawn) -> None:
    """A lock held by another process refuses us until that process releases it."""
    child = spawn(HOLD.format(path=lock_path))
    assert "held" == child.read_line()
    assert try_lock(lock_path).busy
    child.send("release")
    assert 0 == child.wait()
    must_lock(lock_path).unlock()


def test_child_is_refused_while_we_hold(lock_path: str, spawn: Spawn) -> None:
    """Our lock refuses another process."""
    with must_lock(lock_path):
        child = spawn(HOLD.format(path=lock_path))
        assert "busy" == child.read_line()
        child.send("done")
        assert 0 == child.wait()


def test_kernel_releases_on_sigkill(lock_path: str, spawn: Spawn) -> None:
    """SIGKILL the holder: the lock is free at once, and its holder line stays readable."""
    child = spawn(HOLD.format(path=lock_path))
    assert "held" == child.read_line()
    since = read_holder(lock_path)
    child.process.send_signal(signal.SIGKILL)
    assert -signal.SIGKILL == child.wait()
    assert since is not None
    with must_lock(lock_path):
        assert since <= (read_holder(lock_path) or since)


def test_descriptor_not_inherited(lock_path: str, spawn: Spawn) -> None:
    """O_CLOEXEC: a child started while we hold has no descriptor on the lock file,
    and does not keep the lock alive after we release it."""
    code = f"""
import os, sys
fds = [fd for fd in os.listdir("/proc/self/fd")
       if os.path.realpath(f"/proc/self/fd/{{fd}}") == os.path.realpath({lock_path!r})]
print(len(fds))
sys.stdin.readline()
"""
    lock = must_lock(lock_path)
    child = spawn(code, close_fds=False)
    assert "0" == child.read_line()
    lock.unlock()
    must_lock(lock_path).unlock()  # while the child still runs
    child.send("done")
    assert 0 == child.wait()


def test_unlock_releases_a_forked_copy(lock_path: str) -> None:
    """After fork() without exec, our unlock() still frees the lock (LOCK_UN, not just close)."""
    lock = must_lock(lock_path)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child only waits and exits
        os.close(write_end)
        os.read(read_end, 1)
        os._exit(0)
    os.close(read_end)
    try:
        lock.unlock()
        must_lock(lock_path).unlock()
    finally:
        os.close(write_end)
        os.waitpid(pid, 0)


def test_permission_refused_to_create(world_dir: str, spawn: Spawn, drop_privileges: str) -> None:
    """An unprivileged process may not create a lock in our 0755 directory."""
    code = f"""
from sched_lock import LockError, try_lock
{drop_privileges}
try:
    try_lock({world_dir + "/cycle.lock"!r})
except PermissionError as exc:
    print(type(exc).__mro__[1].__name__, exc.errno, exc.filename)
"""
    child = spawn(code)
    expected = f"LockError {errno.EACCES} {world_dir}/cycle.lock"
    assert expected == child.read_line()
    assert 0 == child.wait()
    assert not Path(world_dir, "cycle.lock").exists()


def test_permission_refused_to_open(world_dir: str, spawn: Spawn, drop_privileges: str) -> None:
    """An unprivileged process may not open our 0644 lock file for writing."""
    path = f"{world_dir}/cycle.lock"
    must_lock(path).unlock()
    content = Path(path).read_bytes()
    code = f"""
from sched_lock import try_lock, read_holder
{drop_privileges}
try:
    try_lock({path!r})
except PermissionError as exc:
    print(exc.errno, read_holder({path!r}) is not None)
"""
    child = spawn(code)
    assert f"{errno.EACCES} True" == child.read_line()
    assert 0 == child.wait()
    assert content == Path(path).read_bytes()


def test_holder_write_failure_keeps_the_lock(lock_path: str, spawn: Spawn) -> None:
    """A holder line that cannot be written (file size limit: EFBIG) does not refuse the
    lock, as in Go: the lock is held, the age reads as unknown, and one log line says so,
    once per process however often it fails."""
    code = f"""
import logging, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (5, 5))
logging.basicConfig(stream=sys.stdout, format="LOG %(levelname)s %(name)s %(path)s %(error)s")
from sched_lock import read_holder, try_lock
lock = try_lock({lock_path!r})
print("held", lock.locked, read_holder({lock_path!r}), flush=True)
sys.stdin.readline()
lock.unlock()
again = try_lock({lock_path!r})
print("again", again.locked, flush=True)
again.unlock()
"""
    child = spawn(code)
    assert f"LOG WARNING sched_lock {lock_path} File too large" == child.read_line()
    assert "held True None" == child.read_line()
    assert try_lock(lock_path).busy  # the child holds it
    child.send("go")
    assert "again True" == child.read_line()  # and no second log line before it
    assert 0 == child.wait()
    assert b"" == Path(lock_path).read_bytes()


@pytest.fixture
def told(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget which processes have logged the holder-line failure (once per process)."""
    from sched_lock import _flock

    monkeypatch.setattr(_flock, "_TOLD", {})


def device_node(tmp_path: Path, name: str, minor: int) -> str:
    """A private node of the memory device ``1:minor`` (3 is null, 7 is full).

    A node of its own has its own inode, so its flock is ours alone (the
    shared ``/dev/null`` would contend with any other process locking it).
    """
    path = tmp_path / name
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    return str(path)


@pytest.mark.usefixtures("told")
@pytest.mark.parametrize(
    ("minor", "number"), [(7, errno.ENOSPC), (3, errno.EINVAL)], ids=["dev-full", "dev-null"]
)
def test_unwritable_lock_file_still_locks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, minor: int, number: int
) -> None:
    """A lock file on a full device (ENOSPC) or that is /dev/null (EINVAL on the cut)
    still gives the lock, exclusively; the age is unknown; one log line in all."""
    caplog.set_level(logging.WARNING, "sched_lock")
    path = device_node(tmp_path, "cycle.lock", minor)
    for _ in range(3):
        lock = must_lock(path)
        assert try_lock(path).busy
        assert read_holder(path) is None
        lock.unlock()
    [record] = caplog.records
    assert (path, os.strerror(number)) == (vars(record)["path"], vars(record)["error"])
    assert record.getMessage().startswith("lock holder line not written")


@pytest.mark.usefixtures("told")
def test_io_error_on_the_holder_line_empties_it(
    lock_path: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An I/O error writing the holder line keeps the lock and empties the file, so the
    age reads as unknown, never as the previous holder's."""
    from sched_lock import _flock

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.EIO, "Input/output error")

    Path(lock_path).write_bytes(b"2000-01-01T00:00:00Z\n")
    monkeypatch.setattr(_flock, "_pwrite", pwrite)
    with must_lock(lock_path) as lock:
        assert lock.locked
        assert read_holder(lock_path) is None
        assert b"" == Path(lock_path).read_bytes()
    assert ["Input/output error"] == [vars(r)["error"] for r in caplog.records]


def test_lock_is_the_open_file_description(lock_path: str) -> None:
    """A raw flock on a second open agrees with try_lock (interop with other flock users)."""
    with must_lock(lock_path):
        fd = os.open(lock_path, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)


def test_acquisitions_in_a_row_each_leave_their_own_holder_line(lock_path: str) -> None:
    """Many acquisitions in a row each succeed, exclude a contender, and leave exactly
    their own holder line, never the previous one's (no state lingers between them)."""
    for _ in range(200):
        start = datetime.now(UTC)
        with must_lock(lock_path):
            content = Path(lock_path).read_bytes()
            since = read_holder(lock_path)
            assert not try_lock(lock_path)
        assert HOLDER_LINE.fullmatch(content), content
        assert since is not None
        assert start - timedelta(microseconds=1) <= since <= datetime.now(UTC)


@pytest.mark.parametrize("number", [errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES])
def test_contention_errnos_answer_busy(
    lock_path: str, monkeypatch: pytest.MonkeyPatch, number: int
) -> None:
    """Every contention errno flock may give is a busy answer, never an error
    (flock itself only gives EWOULDBLOCK on Linux, so it is stood in for)."""
    from sched_lock import _flock

    def flock(fd: int, operation: int) -> None:
        raise OSError(number, os.strerror(number))

    monkeypatch.setattr(_flock, "_flock", flock)
    assert try_lock(lock_path).busy


@pytest.mark.parametrize(
    "error", [OSError(errno.ENOLCK, "No locks available"), KeyboardInterrupt()]
)
def test_flock_failures_raise_and_close(
    lock_path: str, monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    """A flock failure that is not contention raises (a LockError naming the path,
    or the interrupt itself) and closes the descriptor (the suite checks for leaks)."""
    from sched_lock import _flock

    def flock(fd: int, operation: int) -> None:
        raise error

    monkeypatch.setattr(_flock, "_flock", flock)
    with pytest.raises(type(error)) as info:
        try_lock(lock_path)
    if isinstance(error, OSError):
        assert isinstance(info.value, LockError)
        assert (errno.ENOLCK, lock_path) == (info.value.errno, info.value.filename)
        assert "flock: No locks available" == info.value.strerror


def test_interrupt_while_writing_releases(lock_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A KeyboardInterrupt while writing the holder line releases the lock."""
    from sched_lock import _flock

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(_flock, "_pwrite", pwrite)
    with pytest.raises(KeyboardInterrupt):
        try_lock(lock_path)
    monkeypatch.undo()
    must_lock(lock_path).unlock()


def test_short_write_continues(lock_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A short pwrite is continued, so the whole line lands."""
    from sched_lock import _flock

    real_pwrite = os.pwrite

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        return real_pwrite(fd, data[:3], offset)

    monkeypatch.setattr(_flock, "_pwrite", pwrite)
    with must_lock(lock_path):
        assert HOLDER_LINE.fullmatch(Path(lock_path).read_bytes())


def test_holders_never_overlap(tmp_path: Path, spawn: Spawn) -> None:
    """Several processes hammering try_lock: the journal of critical sections shows
    every start followed by its own end, never two holders at once."""
    lock_path, journal = str(tmp_path / "cycle.lock"), str(tmp_path / "journal")
    code = f"""
import os, sys
from sched_lock import try_lock
journal = os.open({journal!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
print("ready")
sys.stdin.readline()
held = 0
for _ in range(400):
    lock = try_lock({lock_path!r})
    if not lock:
        continue
    with lock:
        os.write(journal, b"S %d\\n" % os.getpid())
        os.write(journal, b"E %d\\n" % os.getpid())
        held += 1
print(held)
"""
    children = [spawn(code) for _ in range(4)]
    for child in children:
        assert "ready" == child.read_line()
    for child in children:
        child.send("go")
    held = sum(int(child.read_line()) for child in children)
    for child in children:
        assert 0 == child.wait()
    assert held > 0
    entries = Path(journal).read_bytes().splitlines()
    assert 2 * held == len(entries)
    for start, end in zip(entries[::2], entries[1::2], strict=True):
        assert start.replace(b"S", b"E", 1) == end


def test_a_failed_unlock_is_a_lock_error_naming_the_path(lock_path: str) -> None:
    """A release that fails for real (the descriptor was closed behind the lock's back,
    as a helper that closes every descriptor it did not open does) raises LockError with
    the errno and the path, like every other failure; the lock then counts as released."""
    lock = must_lock(lock_path)
    [fd] = [
        int(entry.name)
        for entry in Path("/proc/self/fd").iterdir()
        if os.path.realpath(entry) == os.path.realpath(lock_path)
    ]
    os.close(fd)
    with pytest.raises(LockError) as caught:
        lock.unlock()
    assert (errno.EBADF, lock_path) == (caught.value.errno, caught.value.filename)
    assert not lock.locked
    lock.unlock()  # nothing left to release
    must_lock(lock_path).unlock()


def lock_fds(path: str) -> list[int]:
    """This process's descriptors open on ``path``."""
    real = os.path.realpath(path)
    return [
        int(entry.name)
        for entry in Path("/proc/self/fd").iterdir()
        if os.path.realpath(entry) == real
    ]


def test_unlock_in_a_forked_child_leaves_the_parents_lock_held(lock_path: str) -> None:
    """A child forked while the lock is held that releases its copy (as one that unwinds
    through the holder's ``with`` on ``sys.exit()`` does) only closes its descriptor: no
    LOCK_UN, so the lock stays the parent's, and the child's copy reads as not held."""
    lock = must_lock(lock_path)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        code = 1
        try:
            assert 1 == len(lock_fds(lock_path))
            held_in_child = lock.locked
            lock.unlock()
            code = 0 if not held_in_child and not lock_fds(lock_path) else 3
        finally:
            os._exit(code)
    try:
        _, status = os.waitpid(pid, 0)
        assert 0 == os.waitstatus_to_exitcode(status)
        assert lock.locked
        assert try_lock(lock_path).busy  # still held: the child did not release it
    finally:
        lock.unlock()
    must_lock(lock_path).unlock()


def test_a_forked_childs_copy_collected_is_closed_quietly(lock_path: str) -> None:
    """A forked child that drops its copy of a held lock (garbage collection, interpreter
    exit) closes it without a ResourceWarning and without releasing the parent's lock."""
    lock = must_lock(lock_path)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        code = 1
        try:
            import sys
            import warnings

            raised: list[object] = []
            sys.unraisablehook = raised.append
            warnings.simplefilter("error")
            del lock  # the child's only reference: collected here
            gc.collect()
            code = 0 if not raised and not lock_fds(lock_path) else 4
        finally:
            os._exit(code)
    try:
        _, status = os.waitpid(pid, 0)
        assert 0 == os.waitstatus_to_exitcode(status)
        assert try_lock(lock_path).busy
    finally:
        lock.unlock()


def interrupt_as_it_returns(
    monkeypatch: pytest.MonkeyPatch, name: str, *, on_entry: bool = False
) -> None:
    """Make ``sched_lock._flock.<name>`` raise KeyboardInterrupt once, as it returns.

    A signal handler's exception surfaces when a call returns (or as a Python
    function starts, ``on_entry``): this places one exactly there, after the
    call did its work.
    """
    from sched_lock import _flock

    real = getattr(_flock, name)
    fired: list[bool] = []

    def wrapper(*args: Any) -> Any:
        if on_entry and not fired:
            fired.append(True)
            raise KeyboardInterrupt
        result = real(*args)
        if not fired:
            fired.append(True)
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(_flock, name, wrapper)


@pytest.mark.parametrize(
    "step",
    ["_new_lock", "_open", "_flock", "_time_ns", "format_holder_line", "_pwrite", "_ftruncate"],
)
def test_an_interrupt_in_try_lock_never_leaks_the_lock(
    lock_path: str, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """A KeyboardInterrupt landing as any step of try_lock returns propagates with the
    lock free while its traceback is still alive: an owner exists before the lock is
    taken. (One landing as open() returns can only lose a descriptor that holds no lock.)"""
    before = set(lock_fds(lock_path)) if Path(lock_path).exists() else set()
    interrupt_as_it_returns(monkeypatch, step)
    with pytest.raises(KeyboardInterrupt) as caught:
        try_lock(lock_path)
    monkeypatch.undo()
    assert caught.value.__traceback__ is not None  # try_lock's frame is still referenced
    leaked = set(lock_fds(lock_path)) - before
    for fd in leaked:  # the descriptor open() returned into the interrupt
        assert "_open" == step
        os.close(fd)
    must_lock(lock_path).unlock()


@pytest.mark.parametrize(
    ("step", "on_entry"), [("release", True), ("_flock", False), ("_close", False)]
)
def test_an_interrupt_in_unlock_never_leaks_the_lock(
    lock_path: str, monkeypatch: pytest.MonkeyPatch, step: str, on_entry: bool
) -> None:
    """A KeyboardInterrupt landing inside unlock() (as a helper starts, or as the
    release's system calls return) propagates with the lock released and the
    descriptor closed."""
    lock = must_lock(lock_path)
    interrupt_as_it_returns(monkeypatch, step, on_entry=on_entry)
    with contextlib.suppress(KeyboardInterrupt):
        lock.unlock()
    monkeypatch.undo()
    assert not lock.locked
    assert [] == lock_fds(lock_path)
    must_lock(lock_path).unlock()
