"""The flock(2) overlap guard and SlotFile of the Go scheduler library, for Python.

- :func:`try_lock` takes a non-blocking exclusive lock on a file and records
  the acquisition time in it, or answers a busy (false) :class:`Lock` when
  another holder owns it; :func:`read_holder` reads that time back.
- :class:`SlotFile` is a single-slot byte payload shared across processes,
  changed by blocking flock'd read-modify-write transactions.

Every failure is a :class:`LockError` (an ``OSError``); a failed slot
transaction is a :class:`SlotFileError` carrying the content it read.
"""

from __future__ import annotations

import sys

if sys.platform == "win32":  # pragma: no cover
    raise ImportError("sched-lock needs flock(2) and runs on Linux and macOS only, not Windows")

from ._errors import LockBusy as LockBusy
from ._errors import LockError as LockError
from ._errors import SlotFileError as SlotFileError
from ._errors import is_contention as is_contention
from ._flock import Lock as Lock
from ._flock import try_lock as try_lock
from ._holder import read_holder as read_holder
from ._slot import MAX_SLOT_SIZE as MAX_SLOT_SIZE
from ._slot import SlotFile as SlotFile

__all__ = [
    "MAX_SLOT_SIZE",
    "Lock",
    "LockBusy",
    "LockError",
    "SlotFile",
    "SlotFileError",
    "is_contention",
    "read_holder",
    "try_lock",
]


# A local constant, so the import loads no typing; type checkers take any
# TYPE_CHECKING as true. They see __version__ and no module __getattr__,
# which would make them accept any attribute name, typos included.
TYPE_CHECKING = False
if TYPE_CHECKING:
    __version__: str
else:

    def __getattr__(name: str) -> str:
        if name == "__version__":
            from importlib.metadata import version

            return version("sched-lock")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


del TYPE_CHECKING  # a helper name, not an export
