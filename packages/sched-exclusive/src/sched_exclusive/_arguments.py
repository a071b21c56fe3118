"""What ``Exclusive`` and ``Exclusive.postgres`` accept: every argument's check, in one place.

Each refusal names the argument and, where there is one, the limit it
passed: a directory that is missing or no directory (`CoordinationError`,
outcome ``none``), a ``queue_capacity`` or ``gate`` of the wrong type
(`TypeError`), and for PostgreSQL a name or timeout the server would refuse
on every call (`ValueError`, at construction rather than at each call).
"""

from __future__ import annotations

import errno
import math
import os
import stat
from collections.abc import Callable

from ._compat import TYPE_CHECKING
from ._errors import CoordinationError

if TYPE_CHECKING:
    from ._durations import Duration

__all__ = [
    "MAX_NAME_BYTES",
    "MAX_STATEMENT_MS",
    "checked_capacity",
    "checked_gate",
    "existing_directory",
    "postgres_arguments",
]

#: The longest job name, in UTF-8 bytes: an incompressible name fits PostgreSQL's
#: btree index on the name column (2704-byte rows) with room to spare.
MAX_NAME_BYTES = 2600
#: PostgreSQL's largest ``statement_timeout``, in milliseconds.
MAX_STATEMENT_MS = 2**31 - 1


def existing_directory(directory: str) -> str:
    """*directory*, or `CoordinationError` (outcome ``none``) naming it if it is no directory.

    ``Exclusive`` never creates its directory: who owns it and its mode are the
    application's choice (see the class), and a missing one is usually a volume
    that is not mounted, where a directory made on the spot would coordinate
    nobody.
    """
    try:
        mode = os.stat(directory).st_mode  # noqa: PTH116 - a str path, as the backend's
    except OSError as exc:
        why = "does not exist" if exc.errno == errno.ENOENT else f"cannot be used: {exc.strerror}"
        number = exc.errno if exc.errno is not None else errno.EIO
        raise CoordinationError(number, f"Exclusive's directory {why}", directory) from exc
    if not stat.S_ISDIR(mode):
        raise CoordinationError(
            errno.ENOTDIR, "Exclusive's directory is not a directory", directory
        )
    return directory


def checked_capacity(queue_capacity: int) -> int:
    """The effective queue capacity (at least 1), or `TypeError` if it is no ``int``."""
    if isinstance(queue_capacity, bool) or not isinstance(queue_capacity, int):
        raise TypeError(f"queue_capacity must be an int, not {queue_capacity!r}")
    return max(queue_capacity, 1)


def checked_gate(gate: Callable[[], bool] | None) -> Callable[[], bool] | None:
    """*gate*, or `TypeError` if it is neither callable nor ``None``."""
    if gate is not None and not callable(gate):
        raise TypeError(f"gate must be callable or None, not {gate!r}")
    return gate


def postgres_arguments(
    conninfo: str, name: str, connect_timeout: Duration, statement_timeout: Duration
) -> tuple[float, float]:
    """Check `Exclusive.postgres`'s ``conninfo`` (its type), ``name`` and timeouts.

    Returns:
        ``connect_timeout`` and ``statement_timeout`` in seconds.

    Raises:
        TypeError: ``conninfo`` or ``name`` is no ``str``, or a timeout is no duration.
        ValueError: as `Exclusive.postgres` documents.
    """
    from ._durations import to_seconds

    if not isinstance(conninfo, str):
        raise TypeError(f"conninfo must be a str, not {type(conninfo).__name__}")
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {type(name).__name__}")
    if not name or "\0" in name:
        raise ValueError(f"name must be non-empty text without NUL, not {name!r}")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"name must be valid Unicode text: it holds a lone surrogate "
            f"({name[exc.start]!r}) at index {exc.start}, which UTF-8 cannot encode"
        ) from None
    if size > MAX_NAME_BYTES:
        raise ValueError(
            f"name must be at most {MAX_NAME_BYTES} bytes in UTF-8 (PostgreSQL's btree "
            f"index on the name column takes rows of 2704 bytes at most), got {size}"
        )
    connect = to_seconds(connect_timeout, name="connect_timeout")
    statement = to_seconds(statement_timeout, name="statement_timeout")
    if connect < 2:
        raise ValueError(
            f"connect_timeout must be at least 2 seconds (libpq's minimum), got {connect}"
        )
    if statement <= 0:
        raise ValueError(f"statement_timeout must be positive, got {statement}")
    if math.ceil(statement * 1000) > MAX_STATEMENT_MS:
        raise ValueError(
            f"statement_timeout must be at most {MAX_STATEMENT_MS / 1000} seconds "
            f"(PostgreSQL's limit: 2**31 - 1 milliseconds), got {statement}"
        )
    return connect, statement
