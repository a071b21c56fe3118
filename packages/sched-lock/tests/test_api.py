"""The public surface: exports, final classes, the error hierarchy, import cost."""

from __future__ import annotations

import errno
import pickle
import subprocess
import sys

import pytest

import sched_lock
from sched_lock import Lock, LockError, SlotFile, SlotFileError
from sched_lock._errors import is_contention, wrap_error

EXPECTED = {
    "MAX_SLOT_SIZE",
    "Lock",
    "LockBusy",
    "LockError",
    "SlotFile",
    "SlotFileError",
    "is_contention",
    "read_holder",
    "try_lock",
}


def test_all_lists_every_public_name() -> None:
    """__all__ is exactly the public API, and every name in it exists."""
    assert EXPECTED == set(sched_lock.__all__)
    public = {name for name in vars(sched_lock) if not name.startswith("_")}
    assert EXPECTED == public - {"annotations", "sys", "TYPE_CHECKING"}


def test_constants_and_version() -> None:
    """MAX_SLOT_SIZE is 64 KiB; __version__ comes from the installed metadata."""
    assert 64 * 1024 == sched_lock.MAX_SLOT_SIZE
    assert isinstance(sched_lock.__version__, str)
    with pytest.raises(AttributeError):
        _ = sched_lock.no_such_name


@pytest.mark.parametrize("cls", [Lock, SlotFile])
def test_classes_are_final(cls: type) -> None:
    """Concrete classes are @final and refuse subclassing at type-check time."""
    assert getattr(cls, "__final__", False)


def test_error_hierarchy() -> None:
    """One base, LockError(OSError); SlotFileError is a LockError with .before."""
    assert issubclass(LockError, OSError)
    assert issubclass(SlotFileError, LockError)
    assert SlotFileError(errno.EIO, "x").before is None


@pytest.mark.parametrize(
    ("number", "builtin"),
    [
        (errno.ENOENT, FileNotFoundError),
        (errno.EACCES, PermissionError),
        (errno.EPERM, PermissionError),
        (errno.EISDIR, IsADirectoryError),
        (errno.ENOTDIR, NotADirectoryError),
    ],
)
@pytest.mark.parametrize("base", [LockError, SlotFileError])
def test_errors_are_also_the_matching_builtin(
    number: int, builtin: type[OSError], base: type[LockError]
) -> None:
    """An errno with a builtin subclass gives an error that is both, and pickles."""
    error = wrap_error(OSError(number, "why"), "open", "/p", base)
    assert isinstance(error, base)
    assert isinstance(error, builtin)
    assert (number, "open: why", "/p") == (error.errno, error.strerror, error.filename)
    copy = pickle.loads(pickle.dumps(error))
    assert type(error) is type(copy)
    assert str(error) == str(copy)


def test_other_errnos_use_the_base_class() -> None:
    """ELOOP, EROFS and friends are the base class itself."""
    for number in (errno.ELOOP, errno.EROFS, errno.ENOSPC):
        assert LockError is type(wrap_error(OSError(number, "x"), "open", "/p"))


def test_one_contention_classifier() -> None:
    """EAGAIN, EWOULDBLOCK and EACCES from flock mean "held"; nothing else does."""
    for number in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
        assert is_contention(OSError(number, "held"))
    for number in (errno.EBADF, errno.ENOLCK, errno.EINVAL, errno.EINTR):
        assert not is_contention(OSError(number, "failure"))


def test_import_loads_no_heavy_modules() -> None:
    """Importing sched_lock loads none of the costly modules (typing included)."""
    code = (
        "import sys, sched_lock; "
        "print(sorted(m for m in ('asyncio', 'logging', 're', 'typing', 'subprocess', 'threading', "
        "'pathlib', 'importlib.metadata') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, check=True)
    assert b"[]\n" == out.stdout
