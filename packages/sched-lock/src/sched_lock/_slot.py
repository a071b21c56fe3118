"""SlotFile: a single-slot byte payload under flock'd read-modify-write.

The slot file is created on first use and never unlinked (unlinking a file
that contenders have open lets the next opener lock a fresh inode, breaking
mutual exclusion): clearing it stores an empty payload.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from ._compat import TYPE_CHECKING, final
from ._errors import SlotFileError, open_error, wrap_error
from ._flock import FILE_MODE, open_flags, release_quietly

if TYPE_CHECKING:
    from collections.abc import Callable

MAX_SLOT_SIZE = 64 * 1024
"""The most a :meth:`SlotFile.mutate` reads or writes, in bytes."""

# Most slots are a few bytes: read this much first, the rest only if needed,
# so a small slot does not allocate a 64 KiB buffer per transaction.
_FIRST_READ = 512

_flock = fcntl.flock
_getpid = os.getpid
_pread = os.pread
_pwrite = os.pwrite
_ftruncate = os.ftruncate
_LOCK_EX = fcntl.LOCK_EX
_LOCK_UN = fcntl.LOCK_UN
_close = os.close


def _error(exc: OSError, what: str, path: str, before: bytes | None) -> SlotFileError:
    error = wrap_error(exc, what, path, SlotFileError)
    assert isinstance(error, SlotFileError)
    error.before = before
    return error


def _as_bytes(value: object, path: str) -> bytes:
    if value is None:
        return b""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(
        f"SlotFile.mutate function must return bytes or None, not {type(value).__name__}: {path!r}"
    )


@final
class SlotFile:
    """A byte payload shared across processes through one file.

    Each :meth:`mutate` is one transaction under a blocking exclusive flock on
    the file itself. The payload's meaning is the caller's: parsers should
    read torn or unparseable content as their zero value.

    Args:
        path: the slot file, created on first use. Keep it in a directory
            that untrusted users cannot write.
        follow_symlinks: ``False`` refuses a symbolic link at the final path
            component (``O_NOFOLLOW``): :meth:`mutate` raises a
            `SlotFileError` with ``errno`` ``ELOOP`` whose message says the
            path is a symbolic link.
    """

    __slots__ = ("_flags", "_path")

    def __init__(self, path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> None:
        self._path = os.fspath(path)
        self._flags = open_flags(follow_symlinks)

    @property
    def path(self) -> str:
        """The slot file's path."""
        return self._path

    def __repr__(self) -> str:
        return f"SlotFile({self._path!r})"

    def mutate(self, fn: Callable[[bytes], bytes | None]) -> bytes:
        """Apply ``fn`` to the slot's content under the lock and store its result.

        ``fn`` receives the current bytes (empty on first use, at most
        :data:`MAX_SLOT_SIZE`) and returns the bytes to store, or ``None`` to
        store an empty payload. A result equal to its argument writes nothing,
        so ``slot.mutate(lambda b: b)`` is a read. ``fn`` runs under the lock:
        keep it short, and never call ``mutate`` on the same file from it (it
        would wait for itself forever). If it raises, nothing is written and
        the exception propagates unchanged.

        A crash during the write never leaves the old content's tail behind
        shorter new content: content that keeps or grows its length is
        written in place over the old, and the file is cleared first only
        when the content shrinks, so a crash then leaves an empty slot or the
        complete new content. A write that fails part-way empties the slot.

        Args:
            fn: the transaction, from the old content to the new.

        Returns:
            The content ``fn`` saw.

        Raises:
            SlotFileError: the slot could not be opened, locked, read,
                written or unlocked; its ``before`` is the content read when
                the failure came after the read. It names the path. A failing
                unlock never replaces an exception ``fn`` raised.
            ValueError: ``fn`` returned more than :data:`MAX_SLOT_SIZE` bytes.
            TypeError: ``fn`` returned something that is not bytes-like.
        """
        path = self._path
        owner = _getpid()  # only this process may release the flock (see release)
        try:
            fd = os.open(path, self._flags, FILE_MODE)
        except OSError as exc:
            follow = not self._flags & os.O_NOFOLLOW
            error = open_error(exc, path, follow, SlotFileError)
            assert isinstance(error, SlotFileError)  # its before stays None: nothing was read
            raise error from None
        try:
            before = _transact(fd, path, fn)
        except BaseException:
            release_quietly(fd, owner)  # what is propagating goes on unchanged
            raise
        try:
            # release(), inline: a function starting is a point where a
            # signal handler's exception can surface, and it must not land
            # between the transaction and the unlock.
            try:
                if _getpid() == owner:
                    _flock(fd, _LOCK_UN)
            finally:
                _close(fd)
        except OSError as exc:
            raise _error(exc, "unlock", path, before) from None
        return before


def _transact(fd: int, path: str, fn: Callable[[bytes], bytes | None]) -> bytes:
    """The body of :meth:`SlotFile.mutate` on the open ``fd``: lock, read, apply, write."""
    try:
        _flock(fd, _LOCK_EX)
    except OSError as exc:
        raise _error(exc, "flock", path, None) from None
    try:
        before = _pread(fd, _FIRST_READ, 0)
        if len(before) == _FIRST_READ:
            before += _pread(fd, MAX_SLOT_SIZE - _FIRST_READ, _FIRST_READ)
    except OSError as exc:
        raise _error(exc, "read", path, None) from None
    after = fn(before)
    if after is before:
        return before
    if type(after) is not bytes:
        after = _as_bytes(after, path)
    if after == before:
        return before
    if len(after) > MAX_SLOT_SIZE:
        raise ValueError(
            f"slot content of {len(after)} bytes exceeds the {MAX_SLOT_SIZE}-byte limit: {path!r}"
        )
    written = 0
    try:
        # A file of MAX_SLOT_SIZE bytes or more may be longer than what
        # we read: treat it as shrinking so no tail survives.
        if len(after) < len(before) or len(before) == MAX_SLOT_SIZE:
            _ftruncate(fd, 0)
        while written < len(after):
            written += _pwrite(fd, after[written:], written)
    except OSError as exc:
        if written:  # torn by a failed short write: leave an empty slot instead
            with contextlib.suppress(OSError):
                _ftruncate(fd, 0)
        raise _error(exc, "write", path, before) from None
    return before
