"""What try_lock answers, and what a Lock refuses to become.

- A busy lock is a false answer, as Go's ``ok``, and ``with`` on it raises an
  error naming the file (it was ``TypeError: 'NoneType' object does not
  support the context manager protocol``).
- A Lock cannot be copied or pickled: ``copy.deepcopy(lock).unlock()`` closed
  an unrelated file that had reused the lock's descriptor number, and a Lock
  pickled into a spawn child closed that number there.
- ``follow_symlinks=False`` refuses a symbolic link with ``ELOOP`` and says
  that the path is one.
"""

from __future__ import annotations

import copy
import errno
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from sched_lock import LockBusy, LockError, SlotFile, SlotFileError, try_lock


def job(path: str) -> str:
    """A job as a mypy --strict user writes it: check the answer, then hold it."""
    lock = try_lock(path)
    if not lock:
        return "skipped: another run is in flight"
    with lock:
        return "ran"


def test_a_held_lock_is_true_and_a_busy_one_false(tmp_path: Path) -> None:
    """The answer is a Lock either way; only a held one is true."""
    path = str(tmp_path / "cycle.lock")
    with try_lock(path) as held:
        assert (True, True, False) == (bool(held), held.locked, held.busy)
        busy = try_lock(path)
        assert (False, False, True) == (bool(busy), busy.locked, busy.busy)
        assert f"<sched_lock.Lock {path!r} busy>" == repr(busy)
        assert "skipped: another run is in flight" == job(path)
        busy.unlock()  # nothing to release: a no-op
    assert "ran" == job(path)


def test_with_on_a_busy_lock_raises_an_error_naming_the_file(tmp_path: Path) -> None:
    """``with try_lock(path):`` on a busy lock never runs the block unguarded: it raises
    LockBusy (a LockError and a BlockingIOError) naming the file and the fix."""
    path = str(tmp_path / "cycle.lock")
    ran = []
    with try_lock(path), pytest.raises(LockBusy) as caught, try_lock(path):
        ran.append(True)
    assert [] == ran
    error = caught.value
    assert isinstance(error, LockError)
    assert isinstance(error, BlockingIOError)
    assert (errno.EWOULDBLOCK, path) == (error.errno, error.filename)
    assert "held by another holder" in str(error)
    assert "check its result before `with`" in str(error)
    assert str(error) == str(pickle.loads(pickle.dumps(error)))


@pytest.mark.parametrize(
    "duplicate",
    [copy.copy, copy.deepcopy, pickle.dumps],
    ids=["copy", "deepcopy", "pickle"],
)
def test_a_lock_cannot_be_copied_or_pickled(tmp_path: Path, duplicate: object) -> None:
    """A copy would close a descriptor number that is not its own: refused, clearly,
    and the lock and an unrelated file opened next to it are untouched."""
    path = str(tmp_path / "cycle.lock")
    lock = try_lock(path)
    assert lock
    with (tmp_path / "unrelated").open("w") as unrelated:
        with pytest.raises(TypeError, match=r"cannot be (copied|pickled)") as caught:
            duplicate(lock)  # type: ignore[operator]
        assert repr(path) in str(caught.value)
        unrelated.write("still open")  # its descriptor was not closed
    assert lock.locked
    assert try_lock(path).busy
    lock.unlock()


def test_a_busy_lock_cannot_be_pickled_either(tmp_path: Path) -> None:
    """Refused whatever its state: the rule is about what a Lock is."""
    path = str(tmp_path / "cycle.lock")
    with try_lock(path), pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(try_lock(path), protocol=pickle.HIGHEST_PROTOCOL)


#: A generous bound for the child; never the thing under test.
DEADLINE = 60.0

SPAWN = """
import multiprocessing, sys
from sched_lock import try_lock

def child(lock):
    lock.unlock()

if __name__ == "__main__":
    with try_lock(sys.argv[1]) as lock:
        process = multiprocessing.get_context(sys.argv[2]).Process(target=child, args=(lock,))
        try:
            process.start()
        except TypeError as exc:
            print(type(exc).__name__, "cannot be pickled" in str(exc), lock.locked)
        else:
            process.join()
            print("started", lock.locked)
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_lock_is_not_passed_to_a_spawned_child(tmp_path: Path, method: str) -> None:
    """multiprocessing refuses to start a spawn or forkserver child given a Lock (it
    pickles the arguments first: nothing is started). Run in a child process of its own,
    which keeps the resource tracker multiprocessing starts."""
    script = tmp_path / "spawn_a_lock.py"
    script.write_text(SPAWN)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "cycle.lock"), method],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert ("TypeError True True\n", 0) == (done.stdout, done.returncode), done.stderr


def test_follow_symlinks_false_says_the_path_is_a_symlink(tmp_path: Path) -> None:
    """try_lock and SlotFile refuse a symlink with ELOOP, saying what the path is."""
    target = tmp_path / "target"
    link = tmp_path / "planted.lock"
    link.symlink_to(target)
    with pytest.raises(LockError) as caught:
        try_lock(link, follow_symlinks=False)
    with pytest.raises(SlotFileError) as slot_caught:
        SlotFile(link, follow_symlinks=False).mutate(lambda before: before)
    for error in (caught.value, slot_caught.value):
        assert (errno.ELOOP, str(link)) == (error.errno, error.filename)
        assert "is a symbolic link, which follow_symlinks=False refuses" in str(error)
    assert slot_caught.value.before is None
    assert not target.exists()


def test_a_missing_directory_is_not_called_a_symlink(tmp_path: Path) -> None:
    """Only a symlink is reported as one: a missing directory stays FileNotFoundError."""
    with pytest.raises(FileNotFoundError) as caught:
        try_lock(tmp_path / "absent" / "cycle.lock", follow_symlinks=False)
    assert errno.ENOENT == caught.value.errno
    assert "symbolic link" not in str(caught.value)
    assert not (tmp_path / "absent").exists()
