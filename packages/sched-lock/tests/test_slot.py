"""SlotFile: the flock'd read-modify-write transaction."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pickle
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from sched_lock import MAX_SLOT_SIZE, LockError, SlotFile, SlotFileError, _slot

Spawn = Callable[..., Any]


def increment(before: bytes) -> bytes:
    """The counter idiom: "N\\n" plus one, garbage reading as zero."""
    try:
        count = int(before)
    except ValueError:
        count = 0
    return b"%d\n" % (count + 1)


def identity(before: bytes) -> bytes:
    """The read idiom."""
    return before


@pytest.fixture
def slot_path(tmp_path: Path) -> Path:
    """A path for a slot file that does not exist yet."""
    return tmp_path / "cycle.queued"


def test_first_use_creates_an_empty_slot(slot_path: Path) -> None:
    """The file is created on first use, fn sees b"", and mutate returns what fn saw."""
    seen: list[bytes] = []

    def store(before: bytes) -> bytes:
        seen.append(before)
        return b"1\n"

    assert b"" == SlotFile(slot_path).mutate(store)
    assert [b""] == seen
    assert b"1\n" == slot_path.read_bytes()
    assert b"1\n" == SlotFile(str(slot_path)).mutate(identity)


def test_read_does_not_create_a_write(slot_path: Path) -> None:
    """A result equal to ``before`` (the same object or equal bytes) writes nothing."""
    slot_path.write_bytes(b"7\n")
    os.utime(slot_path, ns=(0, 0))
    slot = SlotFile(slot_path)
    assert b"7\n" == slot.mutate(identity)
    assert b"7\n" == slot.mutate(lambda before: bytes(bytearray(before)))
    assert 0 == slot_path.stat().st_mtime_ns


def test_none_stores_empty(slot_path: Path) -> None:
    """Returning None clears the slot; the file stays (never unlinked)."""
    slot = SlotFile(slot_path)
    slot.mutate(lambda _: b"payload")
    inode = slot_path.stat().st_ino
    assert b"payload" == slot.mutate(lambda _: None)
    assert b"" == slot_path.read_bytes()
    assert inode == slot_path.stat().st_ino


def test_bytes_like_results_are_stored(slot_path: Path) -> None:
    """bytearray and memoryview results are stored as bytes."""
    slot = SlotFile(slot_path)
    slot.mutate(lambda _: bytearray(b"ab"))  # type: ignore[arg-type,return-value]
    slot.mutate(lambda before: memoryview(before + b"c"))  # type: ignore[arg-type,return-value]
    assert b"abc" == slot_path.read_bytes()


def test_wrong_result_type_raises_type_error(slot_path: Path) -> None:
    """A str (or int) result is a TypeError, and nothing is written."""
    slot = SlotFile(slot_path)
    slot.mutate(lambda _: b"keep")
    for bad in ("text", 3):
        with pytest.raises(TypeError, match="must return bytes or None"):
            slot.mutate(lambda _, bad=bad: bad)  # type: ignore[misc]
    assert b"keep" == slot_path.read_bytes()


def test_fn_exception_propagates_and_writes_nothing(slot_path: Path) -> None:
    """An exception from fn propagates as is; the slot is unchanged and unlocked."""
    slot = SlotFile(slot_path)
    slot.mutate(lambda _: b"keep")

    def fail(before: bytes) -> bytes:
        raise KeyError(before)

    with pytest.raises(KeyError):
        slot.mutate(fail)
    assert b"keep" == slot.mutate(lambda _: b"next")


def test_too_large_result_raises_value_error(slot_path: Path) -> None:
    """More than MAX_SLOT_SIZE bytes is refused before any write."""
    slot = SlotFile(slot_path)
    slot.mutate(lambda _: b"keep")
    with pytest.raises(ValueError, match="65537 bytes"):
        slot.mutate(lambda _: b"x" * (MAX_SLOT_SIZE + 1))
    assert b"keep" == slot_path.read_bytes()
    slot.mutate(lambda _: b"y" * MAX_SLOT_SIZE)
    assert MAX_SLOT_SIZE == slot_path.stat().st_size


def test_reads_at_most_64_kib(slot_path: Path) -> None:
    """An oversized file shows its first 64 KiB; storing new content drops the rest."""
    slot_path.write_bytes(b"a" * MAX_SLOT_SIZE + b"tail")
    slot = SlotFile(slot_path)
    assert b"a" * MAX_SLOT_SIZE == slot.mutate(identity)
    assert b"a" * MAX_SLOT_SIZE == slot.mutate(lambda before: b"b" * MAX_SLOT_SIZE)
    assert b"b" * MAX_SLOT_SIZE == slot_path.read_bytes()


class Spy:
    """Records ftruncate/pwrite calls of the slot module while letting them through."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, int]] = []
        real_pwrite, real_ftruncate = os.pwrite, os.ftruncate

        def pwrite(fd: int, data: bytes, offset: int) -> int:
            self.calls.append(("pwrite", len(data)))
            return real_pwrite(fd, data, offset)

        def ftruncate(fd: int, length: int) -> None:
            self.calls.append(("ftruncate", length))
            real_ftruncate(fd, length)

        monkeypatch.setattr(_slot, "_pwrite", pwrite)
        monkeypatch.setattr(_slot, "_ftruncate", ftruncate)


@pytest.mark.parametrize(
    ("before", "after", "calls"),
    [
        (b"", b"1\n", [("pwrite", 2)]),  # grows: in place
        (b"1\n", b"2\n", [("pwrite", 2)]),  # same length: in place
        (b"9\n", b"10\n", [("pwrite", 3)]),
        (b"10\n", b"0\n", [("ftruncate", 0), ("pwrite", 2)]),  # shrinks: clear first
        (b"10\n", b"", [("ftruncate", 0)]),  # clear
        (b"1\n", b"1\n", []),  # unchanged
    ],
)
def test_write_pattern(
    slot_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    before: bytes,
    after: bytes,
    calls: list[tuple[str, int]],
) -> None:
    """In place when the content keeps or grows its length; clear first only when it
    shrinks, so a crash never leaves an old tail behind shorter new content."""
    slot_path.write_bytes(before)
    spy = Spy(monkeypatch)
    assert before == SlotFile(slot_path).mutate(lambda _: after)
    assert calls == spy.calls
    assert after == slot_path.read_bytes()


def test_missing_directory(tmp_path: Path) -> None:
    """A missing directory is a SlotFileError and FileNotFoundError, before=None."""
    path = str(tmp_path / "absent" / "cycle.queued")
    with pytest.raises(FileNotFoundError) as info:
        SlotFile(path).mutate(identity)
    assert isinstance(info.value, SlotFileError)
    assert isinstance(info.value, LockError)
    assert info.value.before is None
    assert path == info.value.filename


def test_symlink_refused_without_follow(tmp_path: Path) -> None:
    """follow_symlinks=False refuses a symlink at the final component (ELOOP)."""
    target = tmp_path / "target"
    target.write_bytes(b"precious")
    link = tmp_path / "slot"
    link.symlink_to(target)
    with pytest.raises(SlotFileError) as info:
        SlotFile(link, follow_symlinks=False).mutate(lambda _: b"x")
    assert errno.ELOOP == info.value.errno
    assert b"precious" == target.read_bytes()
    assert b"precious" == SlotFile(link).mutate(identity)


def test_path_and_repr(slot_path: Path) -> None:
    """``path`` is the path as a str, shown by repr."""
    slot = SlotFile(slot_path)
    assert str(slot_path) == slot.path
    assert f"SlotFile({str(slot_path)!r})" == repr(slot)


def test_write_failure_keeps_before(slot_path: Path, spawn: Spawn) -> None:
    """A write that fails after the read raises SlotFileError with ``before`` set,
    and leaves an empty slot rather than a torn one."""
    slot_path.write_bytes(b"abc")
    code = f"""
import pickle, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (10, 10))
from sched_lock import SlotFile, SlotFileError
try:
    SlotFile({str(slot_path)!r}).mutate(lambda before: before * 10)
except SlotFileError as exc:
    print(pickle.dumps(exc).hex())
"""
    child = spawn(code)
    error = pickle.loads(bytes.fromhex(child.read_line()))
    assert 0 == child.wait()
    assert isinstance(error, SlotFileError)
    assert (errno.EFBIG, b"abc", str(slot_path)) == (error.errno, error.before, error.filename)
    assert b"" == slot_path.read_bytes()


def test_permission_refused(world_dir: str, spawn: Spawn, drop_privileges: str) -> None:
    """An unprivileged process can neither create a slot in our directory nor open
    our slot for writing; the slot is left as it was."""
    path = f"{world_dir}/cycle.queued"
    code = f"""
from sched_lock import SlotFile, SlotFileError
{drop_privileges}
for name in ({path!r}, {world_dir + "/new"!r}):
    try:
        SlotFile(name).mutate(lambda before: b"x")
    except PermissionError as exc:
        print(isinstance(exc, SlotFileError), exc.errno, exc.before)
"""
    SlotFile(path).mutate(lambda _: b"1\n")
    child = spawn(code)
    assert f"True {errno.EACCES} None" == child.read_line()
    assert f"True {errno.EACCES} None" == child.read_line()
    assert 0 == child.wait()
    assert b"1\n" == Path(path).read_bytes()
    assert not Path(world_dir, "new").exists()


def proc_locks_waiters(path: Path) -> int:
    """How many flock waiters /proc/locks shows on ``path``'s inode."""
    stat = path.stat()
    suffix = f":{stat.st_ino}"
    count = 0
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields and "FLOCK" in fields:
            device_inode = fields[fields.index("->") + 5]
            count += device_inode.endswith(suffix)
    return count


def test_mutate_blocks_until_the_holder_releases(slot_path: Path, spawn: Spawn) -> None:
    """The lock is blocking: a mutate waits for another process's flock, then sees
    what that process wrote."""
    code = f"""
import fcntl, os, sys
fd = os.open({str(slot_path)!r}, os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held")
sys.stdin.readline()
os.pwrite(fd, b"from the holder", 0)
os.close(fd)
"""
    child = spawn(code)
    assert "held" == child.read_line()
    seen: list[bytes] = []
    thread = threading.Thread(target=lambda: seen.append(SlotFile(slot_path).mutate(identity)))
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while proc_locks_waiters(slot_path) == 0:  # the kernel's record that we wait
            assert time.monotonic() < deadline, "mutate never waited on the lock"
            # The kernel offers no event for "a flock waiter appeared": this polls
            # that kernel state, with a generous deadline.
            # sleep-ok: polls kernel state that has no event
            time.sleep(0.001)
        assert [] == seen
    finally:
        child.send("release")
        thread.join(30)
    assert [b"from the holder"] == seen
    assert 0 == child.wait()


def test_threads_serialize(slot_path: Path) -> None:
    """Concurrent increments from several threads lose nothing."""
    slot = SlotFile(slot_path)

    def work() -> None:
        for _ in range(200):
            slot.mutate(increment)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert b"800\n" == slot_path.read_bytes()


def test_processes_serialize(slot_path: Path, spawn: Spawn) -> None:
    """Concurrent increments from several processes lose nothing."""
    code = f"""
import sys
from sched_lock import SlotFile
def increment(before):
    return b"%d\\n" % (int(before or b"0") + 1)
print("ready")
sys.stdin.readline()
slot = SlotFile({str(slot_path)!r})
for _ in range(300):
    slot.mutate(increment)
print("done")
"""
    children = [spawn(code) for _ in range(4)]
    for child in children:
        assert "ready" == child.read_line()
    for child in children:  # start them together
        child.send("go")
    for child in children:
        assert "done" == child.read_line()
        assert 0 == child.wait()
    assert b"1200\n" == slot_path.read_bytes()


def test_descriptor_released_on_every_path(slot_path: Path) -> None:
    """Success, no-op, fn failure and type errors all close the descriptor."""
    before = sorted(entry.name for entry in Path("/proc/self/fd").iterdir())
    slot = SlotFile(slot_path)
    for _ in range(20):
        slot.mutate(increment)
        slot.mutate(identity)
        with pytest.raises(ZeroDivisionError):
            slot.mutate(lambda _: 1 // 0)  # type: ignore[arg-type,return-value]
        with pytest.raises(TypeError):
            slot.mutate(lambda _: "x")  # type: ignore[arg-type,return-value]
    assert before == sorted(entry.name for entry in Path("/proc/self/fd").iterdir())
    fd = os.open(slot_path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody holds it
    finally:
        os.close(fd)


PAYLOADS = st.binary(max_size=1500)  # past the 512-byte first read, too


class SlotMachine(RuleBasedStateMachine):
    """SlotFile against a one-value model, through two handles on one path.

    The suite's descriptor check covers every example the machine runs."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="sched-lock-slot-"))
        self.path = self.directory / "slot"
        self.slots = [SlotFile(self.path), SlotFile(str(self.path))]
        self.model = b""

    @rule(handle=st.integers(0, 1), payload=PAYLOADS)
    def store(self, handle: int, payload: bytes) -> None:
        assert self.model == self.slots[handle].mutate(lambda _: payload)
        self.model = payload

    @rule(handle=st.integers(0, 1), suffix=st.binary(max_size=40))
    def append(self, handle: int, suffix: bytes) -> None:
        expected = self.model + suffix
        assert self.model == self.slots[handle].mutate(lambda before: before + suffix)
        self.model = expected

    @rule(handle=st.integers(0, 1), keep=st.integers(0, 2000))
    def shrink(self, handle: int, keep: int) -> None:
        assert self.model == self.slots[handle].mutate(lambda before: before[:keep])
        self.model = self.model[:keep]

    @rule(handle=st.integers(0, 1))
    def read(self, handle: int) -> None:
        assert self.model == self.slots[handle].mutate(identity)

    @rule(handle=st.integers(0, 1))
    def clear(self, handle: int) -> None:
        assert self.model == self.slots[handle].mutate(lambda _: None)
        self.model = b""

    @rule(handle=st.integers(0, 1))
    def fail(self, handle: int) -> None:
        def boom(_: bytes) -> bytes:
            raise ArithmeticError

        with pytest.raises(ArithmeticError):
            self.slots[handle].mutate(boom)

    @invariant()
    def file_matches_model(self) -> None:
        actual = self.path.read_bytes() if self.path.exists() else b""
        assert self.model == actual

    def teardown(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


TestSlotMachine = SlotMachine.TestCase


def failing(number: int) -> Callable[..., Any]:
    """A stand-in system call failing with ``number``."""

    def call(*args: object) -> Any:
        raise OSError(number, os.strerror(number))

    return call


@pytest.mark.parametrize("call", ["_flock", "_pread"])
def test_failures_before_the_read_have_no_before(
    slot_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    """A lock or read failure raises SlotFileError naming the path, before=None."""
    slot_path.write_bytes(b"1\n")
    monkeypatch.setattr(_slot, call, failing(errno.EIO))
    with pytest.raises(SlotFileError) as info:
        SlotFile(slot_path).mutate(increment)
    assert (errno.EIO, str(slot_path), None) == (
        info.value.errno,
        info.value.filename,
        info.value.before,
    )
    assert b"1\n" == slot_path.read_bytes()


def test_failed_write_keeps_old_content(slot_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails having written nothing leaves the old content (the demand
    it records stands) and reports ``before``."""
    slot_path.write_bytes(b"1\n")
    monkeypatch.setattr(_slot, "_pwrite", failing(errno.ENOSPC))
    with pytest.raises(SlotFileError) as info:
        SlotFile(slot_path).mutate(increment)
    assert (errno.ENOSPC, b"1\n") == (info.value.errno, info.value.before)
    assert b"1\n" == slot_path.read_bytes()


def test_torn_write_leaves_empty(slot_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A short write followed by a failure leaves an empty slot, not a torn one."""
    slot_path.write_bytes(b"9\n")
    real_pwrite = os.pwrite
    calls: list[int] = []

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        calls.append(offset)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwrite(fd, data[:1], offset)

    monkeypatch.setattr(_slot, "_pwrite", pwrite)
    with pytest.raises(SlotFileError) as info:
        SlotFile(slot_path).mutate(increment)
    assert b"9\n" == info.value.before
    assert [0, 1] == calls
    assert b"" == slot_path.read_bytes()


def test_interrupt_in_fn_releases(slot_path: Path) -> None:
    """KeyboardInterrupt from fn propagates at once, and the slot is unlocked."""

    def interrupt(_: bytes) -> bytes:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        SlotFile(slot_path).mutate(interrupt)
    assert b"" == SlotFile(slot_path).mutate(increment)


def close_the_slot_descriptor(slot_path: Path) -> None:
    """Close this process's descriptor on the slot file behind the transaction's back
    (as a helper that closes every descriptor it did not open does): the release that
    ends the transaction then fails for real, with ``EBADF``."""
    [fd] = [
        int(entry.name)
        for entry in Path("/proc/self/fd").iterdir()
        if os.path.realpath(entry) == os.path.realpath(slot_path)
    ]
    os.close(fd)


def test_a_failed_unlock_is_a_slot_file_error_with_before(slot_path: Path) -> None:
    """A release that fails after the read is a SlotFileError naming the path and
    carrying the content read, like every other failure after the read."""
    slot_path.write_bytes(b"3\n")

    def fn(before: bytes) -> bytes:
        close_the_slot_descriptor(slot_path)
        return before

    with pytest.raises(SlotFileError) as caught:
        SlotFile(slot_path).mutate(fn)
    assert (errno.EBADF, str(slot_path), b"3\n") == (
        caught.value.errno,
        caught.value.filename,
        caught.value.before,
    )
    assert b"3\n" == SlotFile(slot_path).mutate(identity)


def test_a_failed_unlock_never_replaces_what_fn_raised(slot_path: Path) -> None:
    """An exception from ``fn`` propagates unchanged even when the release fails too."""
    failure = RuntimeError("fn failed")

    def fn(before: bytes) -> bytes:
        close_the_slot_descriptor(slot_path)
        raise failure

    with pytest.raises(RuntimeError) as caught:
        SlotFile(slot_path).mutate(fn)
    assert failure is caught.value
    assert b"" == SlotFile(slot_path).mutate(identity)


@pytest.mark.parametrize(
    ("step", "on_entry", "nth"),
    [("release", True, 1), ("_getpid", False, 2), ("_flock", False, 2), ("_close", False, 1)],
)
def test_an_interrupt_in_the_release_never_leaks_the_slot_lock(
    slot_path: Path, monkeypatch: pytest.MonkeyPatch, step: str, on_entry: bool, nth: int
) -> None:
    """A KeyboardInterrupt landing as the transaction's release starts, or as any of its
    calls returns, leaves the slot unlocked and its descriptor closed (the suite checks
    for leaks): another transaction goes through at once."""
    real = getattr(_slot, step, None)
    calls = 0

    def wrapper(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        if on_entry and calls == nth:
            raise KeyboardInterrupt
        assert real is not None
        result = real(*args)
        if calls == nth:
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(_slot, step, wrapper, raising=False)
    with contextlib.suppress(KeyboardInterrupt):
        SlotFile(slot_path).mutate(increment)
    monkeypatch.undo()
    fd = os.open(slot_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if the slot was left locked
    finally:
        os.close(fd)
