"""The package's exception hierarchy and its one errno classifier.

``LockError(OSError)`` is the root: every system-call failure this package
raises is one (bad arguments stay ``TypeError`` / ``ValueError``), and carries
``errno``, ``strerror`` (prefixed with the operation that failed) and
``filename`` (the lock or slot path). ``SlotFileError(LockError)`` adds
``before``. So that ``except FileNotFoundError`` and ``except PermissionError``
keep working, the raised instance is of a subclass that also derives from the
matching builtin (``FileNotFoundError``, ``PermissionError``,
``IsADirectoryError``, ``NotADirectoryError``); every other errno gets the
public class itself. All of them pickle. These subclasses
(``LockPermissionError``, ``SlotFileNotFoundError``...) are not exported:
catch the public class or the builtin.
"""

from __future__ import annotations

import errno as _errno
import os
import stat as _stat

from ._compat import final


class LockError(OSError):
    """A lock, holder or slot file operation failed.

    Contention is not a failure: :func:`try_lock` answers it with a busy
    :class:`Lock` (false in a boolean context), and only entering that one
    in a ``with`` raises (:class:`LockBusy`). ``errno`` tells the cause and
    ``filename`` names the path; the instance is also a
    ``FileNotFoundError``, ``PermissionError``, ``IsADirectoryError`` or
    ``NotADirectoryError`` when the errno means one of those.
    """


@final
class LockBusy(LockError, BlockingIOError):
    """A busy :class:`Lock` was used as a context manager.

    :func:`try_lock` found the lock held by another holder and acquired
    nothing; ``with`` on its result would run the block unguarded, so it
    raises this instead, naming the file (``filename``; ``errno`` is
    ``EWOULDBLOCK``). Check the result first: ``if not lock: return``.
    """


class SlotFileError(LockError):
    """A :meth:`SlotFile.mutate` transaction failed.

    Attributes:
        before: the slot content the transaction read, when the failure
            happened after the read (a write or truncate error); ``None`` when
            the slot could not be opened, locked or read.
    """

    before: bytes | None = None


# Contention answers from flock(2) (EWOULDBLOCK) and, on some systems and for
# fcntl-emulated flocks, EAGAIN or EACCES: "someone else holds it", not a failure.
_CONTENTION = frozenset({_errno.EAGAIN, _errno.EWOULDBLOCK, _errno.EACCES})


def is_contention(exc: OSError) -> bool:
    """Tell whether a failed non-blocking flock(2) means "held by another".

    The one errno classifier for flock, shared by sched-exclusive: contention
    is ``EWOULDBLOCK`` (what Linux and macOS give), ``EAGAIN``, or ``EACCES``
    (what some systems and fcntl-emulated flocks give); every other errno is
    a real failure.

    Args:
        exc: what ``fcntl.flock(fd, ... | LOCK_NB)`` raised.

    Returns:
        Whether the lock is held by another open file description.
    """
    return exc.errno in _CONTENTION


_BUILTINS: tuple[type[OSError], ...] = (
    FileNotFoundError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
)
_BY_ERRNO: dict[tuple[type[LockError], int], type[LockError]] = {}


def _register() -> None:
    mapping = {
        FileNotFoundError: (_errno.ENOENT,),
        PermissionError: (_errno.EACCES, _errno.EPERM),
        IsADirectoryError: (_errno.EISDIR,),
        NotADirectoryError: (_errno.ENOTDIR,),
    }
    for base in (LockError, SlotFileError):
        for builtin in _BUILTINS:
            # LockPermissionError, SlotFileNotFoundError...: read well in tracebacks
            name = base.__name__.removesuffix("Error") + builtin.__name__
            name = name.replace("FileFile", "File")
            cls: type[LockError] = type(name, (base, builtin), {"__module__": __name__})
            globals()[name] = cls  # a module-level name, so the error pickles
            for number in mapping[builtin]:
                _BY_ERRNO[base, number] = cls


_register()


def busy_error(path: str) -> LockBusy:
    """The error of a busy lock entered in a ``with``."""
    return LockBusy(
        _errno.EWOULDBLOCK,
        "lock is held by another holder: try_lock() acquired nothing; "
        "check its result before `with` (if not lock: ...)",
        path,
    )


def open_error(
    exc: OSError, path: str, follow_symlinks: bool, base: type[LockError] = LockError
) -> LockError:
    """Build the package error for a failed ``open`` of *path*.

    A symbolic link that ``follow_symlinks=False`` refused is reported as one,
    with ``ELOOP``, whatever errno the system chose (Linux says ``ELOOP``,
    FreeBSD ``EMLINK``, and ``EACCES`` has been seen).
    """
    if not follow_symlinks and exc.errno != _errno.ENOENT:
        try:
            link = _stat.S_ISLNK(os.lstat(path).st_mode)
        except OSError:
            link = False
        if link:
            cls = _BY_ERRNO.get((base, _errno.ELOOP), base)
            return cls(
                _errno.ELOOP,
                "open: the path is a symbolic link, which follow_symlinks=False refuses",
                path,
            )
    return wrap_error(exc, "open", path, base)


def wrap_error(exc: OSError, what: str, path: str, base: type[LockError] = LockError) -> LockError:
    """Build the package error for ``exc``, raised while doing ``what`` on ``path``."""
    number = exc.errno if exc.errno is not None else _errno.EIO
    cls = _BY_ERRNO.get((base, number), base)
    return cls(number, f"{what}: {exc.strerror or exc}", path)
