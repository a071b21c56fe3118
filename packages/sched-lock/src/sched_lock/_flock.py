"""The flock(2) overlap guard: :func:`try_lock` and :class:`Lock`.

Lock files are never unlinked, neither here nor on release: unlinking a path
that another process has open (or is about to open) lets the next opener
create a fresh inode and lock *that*, so two holders would run at once. The
file stays, holding the last holder's timestamp, which is harmless while the
lock is free.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
import warnings

from ._compat import TYPE_CHECKING, final
from ._errors import is_contention, wrap_error
from ._holder import format_holder_line

if TYPE_CHECKING:
    from types import TracebackType

# Read-write so the holder line can be written; created 0644 (before the
# umask, as the Go library does); close-on-exec so a child process never
# inherits the descriptor and keeps the lock alive after we release it.
OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
NOFOLLOW_FLAGS = OPEN_FLAGS | os.O_NOFOLLOW
FILE_MODE = 0o644

_open = os.open
_close = os.close
_flock = fcntl.flock
_pwrite = os.pwrite
_ftruncate = os.ftruncate
_time_ns = time.time_ns
_LOCK_EX_NB = fcntl.LOCK_EX | fcntl.LOCK_NB
_LOCK_UN = fcntl.LOCK_UN


def open_flags(follow_symlinks: bool) -> int:
    """The ``os.open`` flags for a lock or slot file."""
    return OPEN_FLAGS if follow_symlinks else NOFOLLOW_FLAGS


def release(fd: int) -> None:
    """Unlock and close ``fd``.

    The explicit ``LOCK_UN`` matters when a ``fork()`` without ``exec`` has
    duplicated the descriptor: closing our copy alone would leave the lock
    held by the child.
    """
    try:
        _flock(fd, _LOCK_UN)
    finally:
        _close(fd)


def release_quietly(fd: int) -> None:
    """:func:`release` on a failure path: an error of its own must not replace
    the one already propagating."""
    with contextlib.suppress(OSError):
        release(fd)


@final
class Lock:
    """An exclusive flock(2) held on a lock file; get one from :func:`try_lock`.

    The lock belongs to one open file description, so it excludes other
    processes and other opens of the same path in this process alike. The
    kernel releases it when the process dies. Use it as a context manager or
    call :meth:`unlock`; a lock that is garbage-collected while held is
    released with a ``ResourceWarning``, like an unclosed file.
    """

    __slots__ = ("_fds", "_path")

    # The descriptor, in a list so that unlock() takes it out atomically
    # (list.pop): two threads unlocking at once can never close it twice.
    _fds: list[int]
    _path: str

    def __init__(self) -> None:
        raise TypeError("Lock cannot be created directly; use sched_lock.try_lock()")

    @property
    def path(self) -> str:
        """The lock file's path, as given to :func:`try_lock`."""
        return self._path

    @property
    def locked(self) -> bool:
        """Whether this lock is still held (``unlock`` has not been called)."""
        return bool(self._fds)

    def unlock(self) -> None:
        """Release the lock and close the file; calling it again does nothing.

        The file stays on disk (see the module documentation for why).

        Raises:
            LockError: the release failed (``EBADF`` when the descriptor was
                closed behind the lock's back, an I/O error on close...). It
                names the path. The lock counts as released all the same.
        """
        if self._fds:
            try:
                fd = self._fds.pop()
            except IndexError:  # another thread got there first
                return
            try:
                release(fd)
            except OSError as exc:
                raise wrap_error(exc, "unlock", self._path) from None

    def __enter__(self) -> Lock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.unlock()

    def __del__(self) -> None:
        if getattr(self, "_fds", None):
            warnings.warn(
                f"unreleased lock on {self._path!r}", ResourceWarning, stacklevel=1, source=self
            )
            self.unlock()

    def __repr__(self) -> str:
        state = "locked" if self._fds else "unlocked"
        return f"<sched_lock.Lock {self._path!r} {state}>"


_new_lock = object.__new__


def try_lock(path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> Lock | None:
    """Try to take an exclusive lock on ``path`` without waiting.

    The file is created (mode 0644, less the umask) if absent. A contender
    never writes it; the new holder replaces its content with one line, the
    acquisition time in RFC 3339 UTC, which :func:`read_holder` (and the Go
    library's ``ReadHolder``) reads back. The line is written in place and the
    file then cut to its length, never truncated to zero first.

    Args:
        path: the lock file. Keep it in a directory that untrusted users
            cannot write.
        follow_symlinks: ``False`` refuses a symbolic link at the final path
            component (``O_NOFOLLOW``, failing with ``ELOOP``).

    Returns:
        The held :class:`Lock`, or ``None`` when another holder owns it —
        another process, or another open of the same path in this one.

    Raises:
        LockError: the file cannot be created, opened, locked or written
            (``FileNotFoundError`` for a missing directory, ``PermissionError``,
            ``ELOOP`` for a refused symlink...). It names the path.
    """
    name = path if type(path) is str else os.fspath(path)
    try:
        fd = _open(name, OPEN_FLAGS if follow_symlinks else NOFOLLOW_FLAGS, FILE_MODE)
    except OSError as exc:
        raise wrap_error(exc, "open", name) from None
    try:
        _flock(fd, _LOCK_EX_NB)
    except OSError as exc:
        _close(fd)
        if is_contention(exc):
            return None
        raise wrap_error(exc, "flock", name) from None
    except BaseException:
        _close(fd)
        raise
    try:
        line = format_holder_line(_time_ns())
        # Write first, then cut: on ext4 a truncate to zero followed by a write
        # makes close() flush the data (the replace-by-truncate heuristic),
        # about 20 times slower. A reader that races this sees a torn line,
        # which read_holder reports as unknown, as the spec allows.
        written = _pwrite(fd, line, 0)
        while written < len(line):  # a short write: go on, so a failure shows its errno
            written += _pwrite(fd, line[written:], written)
        _ftruncate(fd, len(line))
    except OSError as exc:
        release_quietly(fd)
        raise wrap_error(exc, "write holder line", name) from None
    except BaseException:
        release_quietly(fd)
        raise
    lock: Lock = _new_lock(Lock)
    lock._fds = [fd]
    lock._path = name
    return lock
