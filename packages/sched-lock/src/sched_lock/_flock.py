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
from operator import attrgetter as _attrgetter

from ._compat import TYPE_CHECKING, final
from ._errors import busy_error, is_contention, open_error, wrap_error
from ._holder import format_holder_line

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Any, NoReturn, SupportsIndex

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
_getpid = os.getpid
_LOCK_EX_NB = fcntl.LOCK_EX | fcntl.LOCK_NB
_LOCK_UN = fcntl.LOCK_UN


def open_flags(follow_symlinks: bool) -> int:
    """The ``os.open`` flags for a lock or slot file."""
    return OPEN_FLAGS if follow_symlinks else NOFOLLOW_FLAGS


def release(fd: int, owner: int) -> None:
    """Unlock and close ``fd``, locked by process ``owner``; elsewhere only close it.

    The explicit ``LOCK_UN`` matters when a ``fork()`` without ``exec`` has
    duplicated the descriptor: closing our copy alone would leave the lock
    held by the child. For the same reason a forked child must never send it:
    the lock belongs to the open file description the child shares with its
    parent, so the child's ``LOCK_UN`` would release the parent's lock while
    the parent still works under it.
    """
    try:
        if _getpid() == owner:
            _flock(fd, _LOCK_UN)
    finally:
        _close(fd)


def release_quietly(fd: int, owner: int) -> None:
    """:func:`release` on a failure path: an error of its own must not replace
    the one already propagating."""
    with contextlib.suppress(OSError):
        release(fd, owner)


# The processes that have said the holder line could not be written: one line
# each, however often it fails (a full disk fails every acquisition).
_TOLD: dict[int, object] = {}


def _holder_line_failed(path: str, exc: OSError) -> None:
    """Log, once per process, that the holder's age will read as unknown."""
    told = object()
    if _TOLD.setdefault(_getpid(), told) is not told:
        return
    import logging  # about 15 ms: paid only by a process that gets here

    logging.getLogger("sched_lock").warning(
        "lock holder line not written, so the holder's age reads as unknown "
        "(the lock itself works; said once per process): %s: %s",
        path,
        exc.strerror or exc,
        extra={"path": path, "error": exc.strerror or str(exc)},
    )


def _write_holder(fd: int, path: str) -> None:
    """Record the acquisition time in the held lock file; best effort, as in Go.

    A failure (a full disk, ``/dev/null`` as the lock file, an I/O error)
    only costs the holder age a contender can read, never the lock: it is
    logged once per process, and the file is emptied if it can be, so the age
    reads as unknown rather than as the previous holder's.
    """
    line = format_holder_line(_time_ns())
    try:
        # Write first, then cut: on ext4 a truncate to zero followed by a write
        # makes close() flush the data (the replace-by-truncate heuristic),
        # about 20 times slower. A reader that races this sees a torn line,
        # which read_holder reports as unknown, as the spec allows.
        written = _pwrite(fd, line, 0)
        while written < len(line):  # a short write: go on, so a failure shows its errno
            written += _pwrite(fd, line[written:], written)
        _ftruncate(fd, len(line))
    except OSError as exc:
        with contextlib.suppress(OSError):
            _ftruncate(fd, 0)
        _holder_line_failed(path, exc)


@final
class Lock:
    """The answer of :func:`try_lock`: an exclusive flock(2) on a lock file, or a busy one.

    A held lock is true in a boolean context; a busy one (another holder
    owns the lock: nothing was acquired) is false, as Go's ``ok`` is, and
    using it as a context manager raises :class:`LockBusy` naming the file
    rather than running the block unguarded::

        lock = try_lock(path)
        if not lock:
            return  # another run is in flight
        with lock:
            ...

    The lock belongs to one open file description, so it excludes other
    processes and other opens of the same path in this process alike. The
    kernel releases it when the process dies. Use it as a context manager or
    call :meth:`unlock`; a lock that is garbage-collected while held is
    released with a ``ResourceWarning``, like an unclosed file. For the same
    reason it cannot be copied or pickled (a copy would close a descriptor
    number that is not its own), nor passed to a ``multiprocessing`` child.

    Only the process that took the lock ever releases it. A process forked
    from the holder (``fork()`` without ``exec``, a ``multiprocessing`` fork
    pool) inherits a copy that is not held there (:attr:`locked` is false):
    its :meth:`unlock`, or its copy being collected, closes the child's
    descriptor and leaves the lock to its holder.
    """

    __slots__ = ("_busy", "_fds", "_path", "_pid")

    # The descriptor, in a list so that unlock() claims it atomically (one
    # `del`): two threads unlocking at once can never close it twice.
    _fds: list[int]
    _path: str
    _pid: int  # the process that took the lock: the only one to release it
    _busy: bool  # try_lock() found another holder: nothing was acquired

    def __init__(self) -> None:
        raise TypeError("Lock cannot be created directly; use sched_lock.try_lock()")

    def __bool__(self) -> bool:
        """Whether this process holds the lock: :attr:`locked`."""
        return self.locked

    if TYPE_CHECKING:

        @property
        def busy(self) -> bool:
            """Whether :func:`try_lock` found the lock held by another holder."""
    else:
        # Read in C (no Python frame runs), so that a caller can test a fresh
        # answer where no signal handler's exception can land on a held lock.
        busy = property(
            _attrgetter("_busy"),
            doc="Whether :func:`try_lock` found the lock held by another holder "
            "(nothing was acquired). Reading it runs no Python code.",
        )

    @property
    def path(self) -> str:
        """The lock file's path, as given to :func:`try_lock`."""
        return self._path

    @property
    def locked(self) -> bool:
        """Whether this process holds the lock.

        True from :func:`try_lock` until :meth:`unlock`; never true in a
        process forked from the holder, where the lock stays the holder's.
        """
        return bool(self._fds) and self._pid == _getpid()

    def unlock(self) -> None:
        """Release the lock and close the file; calling it again does nothing.

        The file stays on disk (see the module documentation for why). In a
        process forked from the holder it only closes this process's
        descriptor: the lock stays the holder's.

        Raises:
            LockError: the release failed (``EBADF`` when the descriptor was
                closed behind the lock's back, an I/O error on close...). It
                names the path. The lock counts as released all the same.
        """
        fds = self._fds
        owned = self._pid == _getpid()
        try:
            fd = fds[0]
            # The claim. No call returns between it and the release below, so
            # an exception from a signal handler (which surfaces as a call
            # returns or a function starts) cannot land in between.
            del fds[0]
        except IndexError:  # not held, or another thread got there first
            return
        try:
            try:
                if owned:
                    _flock(fd, _LOCK_UN)
            finally:
                _close(fd)
        except OSError as exc:
            raise wrap_error(exc, "unlock", self._path) from None

    def __enter__(self) -> Lock:
        if self._busy:
            raise busy_error(self._path)
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
            owned = self._pid == _getpid()
            try:
                self.unlock()  # first: a warning turned into an error must not skip it
            finally:
                if owned:  # a forked child's copy is closed quietly
                    warnings.warn(
                        f"unreleased lock on {self._path!r}",
                        ResourceWarning,
                        stacklevel=1,
                        source=self,
                    )

    def __repr__(self) -> str:
        state = "busy" if self._busy else "locked" if self.locked else "unlocked"
        return f"<sched_lock.Lock {self._path!r} {state}>"

    def _refuse(self, what: str) -> NoReturn:
        raise TypeError(
            f"a sched_lock.Lock cannot be {what}: the lock on {self._path!r} belongs to "
            "this process's open file description, and a copy would close a descriptor "
            "number that is not its own; take the lock where it is needed"
        )

    def __copy__(self) -> NoReturn:
        self._refuse("copied")

    def __deepcopy__(self, memo: Any) -> NoReturn:
        self._refuse("copied")

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        self._refuse("pickled (or passed to another process)")


_new_lock = object.__new__


def try_lock(path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> Lock:
    """Try to take an exclusive lock on ``path`` without waiting.

    The answer is a :class:`Lock` either way, true when it is held and false
    when another holder owns the lock, as Go's ``ok``: check it before you
    use it (``if not lock: return``). A busy lock entered in a ``with``
    raises :class:`LockBusy`, naming the file, instead of running the block
    unguarded.

    The file is created (mode 0644, less the umask) if absent. A contender
    never writes it; the new holder replaces its content with one line, the
    acquisition time in RFC 3339 UTC, which :func:`read_holder` (and the Go
    library's ``ReadHolder``) reads back. The line is written in place and the
    file then cut to its length, never truncated to zero first. Writing it is
    best effort, as in the Go library: when it fails (a full disk, a lock
    file that is ``/dev/null``, an I/O error) the lock is held all the same,
    the holder's age reads as unknown, and the failure is logged once per
    process on the ``sched_lock`` logger.

    An exception raised while ``try_lock`` runs (a ``KeyboardInterrupt``
    from SIGINT, say) never leaves the lock held: the :class:`Lock` owns the
    descriptor before the lock is taken.

    Args:
        path: the lock file. Keep it in a directory that untrusted users
            cannot write.
        follow_symlinks: ``False`` refuses a symbolic link at the final path
            component (``O_NOFOLLOW``): a `LockError` with ``errno`` ``ELOOP``
            whose message says the path is a symbolic link.

    Returns:
        The held :class:`Lock`; or, when another holder owns it (another
        process, or another open of the same path in this one), a busy one:
        false, :attr:`Lock.busy`, holding nothing.

    Raises:
        LockError: the file cannot be created, opened or locked
            (``FileNotFoundError`` for a missing directory, ``PermissionError``,
            ``ELOOP`` for a refused symlink...). It names the path.
    """
    name = path if type(path) is str else os.fspath(path)
    # The owner exists before the lock is taken: from the moment the
    # descriptor is stored in it, whatever interrupts this function finds
    # the lock in an object that releases it.
    lock: Lock = _new_lock(Lock)
    lock._path = name
    lock._pid = _getpid()
    lock._fds = []
    lock._busy = False
    try:
        fd = _open(name, OPEN_FLAGS if follow_symlinks else NOFOLLOW_FLAGS, FILE_MODE)
    except OSError as exc:
        raise open_error(exc, name, follow_symlinks) from None
    lock._fds = [fd]
    try:
        try:
            _flock(fd, _LOCK_EX_NB)
        except OSError as exc:
            lock._fds = []
            _close(fd)
            if is_contention(exc):
                lock._busy = True
                return lock
            raise wrap_error(exc, "flock", name) from None
        _write_holder(fd, name)
    except BaseException:
        with contextlib.suppress(OSError):
            lock.unlock()
        raise
    return lock
