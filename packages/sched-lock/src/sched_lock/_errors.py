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


class LockError(OSError):
    """A lock, holder or slot file operation failed for a real reason.

    Contention is never a ``LockError``: :func:`try_lock` answers ``None`` for
    it. ``errno`` tells the cause and ``filename`` names the path; the instance
    is also a ``FileNotFoundError``, ``PermissionError``, ``IsADirectoryError``
    or ``NotADirectoryError`` when the errno means one of those.
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
    """Tell whether a failed non-blocking flock means "held by another"."""
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


def wrap_error(exc: OSError, what: str, path: str, base: type[LockError] = LockError) -> LockError:
    """Build the package error for ``exc``, raised while doing ``what`` on ``path``."""
    number = exc.errno if exc.errno is not None else _errno.EIO
    cls = _BY_ERRNO.get((base, number), base)
    return cls(number, f"{what}: {exc.strerror or exc}", path)
