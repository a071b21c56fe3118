"""The flock backend: ``cycle.lock`` and ``cycle.queued`` inside one directory.

The lock is :func:`sched_lock.try_lock` on ``dir/cycle.lock`` (which also
records the holder line the Go library's ``ReadHolder`` reads back); the
counter is a :class:`sched_lock.SlotFile` on ``dir/cycle.queued`` holding
``"N\\n"``, the Go library's format. Neither file is ever unlinked: removing a
locked file would let a concurrent opener lock a different inode.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import filterfalse
from operator import attrgetter

from sched_lock import Lock, SlotFile, try_lock

from ._compat import final
from ._outcome import LOCK_NAME, QUEUE_NAME

_BUSY = attrgetter("busy")

__all__ = ["FileBackend", "format_count", "join", "parse_count"]

_INT64_MAX = 2**63 - 1
# What Go's strings.TrimSpace trims (unicode.IsSpace): ASCII white space,
# U+0085, U+00A0 and the other Unicode White_Space characters.
_GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def parse_count(content: bytes) -> int:
    """Read a counter file's bytes as the Go library does.

    That is ``strconv.Atoi(strings.TrimSpace(content))``: Unicode white space
    trimmed (an invalid UTF-8 byte stops the trim), then an optional sign
    and ASCII digits, leading zeros allowed, in the int64 range.

    Args:
        content: the counter file's bytes.

    Returns:
        The count; empty, torn, negative, out-of-range or garbage content
        reads as zero (the self-healing rule every slot parser follows).
    """
    # Fast path: what this library and the Go library write ("N\n", N < 10**18).
    if 1 < len(content) < 20 and content[-1] == 10 and content[:-1].isdigit():
        return int(content[:-1])
    text = content.decode("utf-8", "surrogateescape").strip(_GO_SPACE)
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not (digits.isascii() and digits.isdigit()):
        return 0
    digits = digits.lstrip("0")
    if len(digits) > 19:  # past int64, and past int()'s digit limit for long strings
        return 0
    count = int(digits or "0")
    return count if text[:1] != "-" and count <= _INT64_MAX else 0


def format_count(count: int) -> bytes:
    """Format ``count`` as the counter file holds it: decimal digits and a newline."""
    return b"%d\n" % count


def join(directory: str, name: str) -> str:
    """``directory/name`` (POSIX paths; cheaper than importing pathlib)."""
    return directory + name if directory.endswith("/") else f"{directory}/{name}"


def _unchanged(content: bytes) -> bytes:
    return content


@final
class FileBackend:
    """:class:`._backend.Backend` over flock(2) files in one directory."""

    __slots__ = ("_lock_path", "_slot")

    def __init__(self, directory: str) -> None:
        self._lock_path = join(directory, LOCK_NAME)
        self._slot = SlotFile(join(directory, QUEUE_NAME))

    def try_acquire(self) -> Lock | None:
        # A busy answer (it holds nothing) becomes None. The held lock is never
        # kept in a local, nor given to Python code (bool() would run one): an
        # interrupt as the call returns drops it at once, and its finalizer
        # releases it. filterfalse, attrgetter and Lock.busy all run in C.
        return next(filterfalse(_BUSY, (try_lock(self._lock_path),)), None)

    def read_counter(self) -> int:
        return parse_count(self._slot.mutate(_unchanged))

    def update_counter(self, fn: Callable[[int], int]) -> int:
        seen = 0

        def step(before: bytes) -> bytes:
            nonlocal seen
            seen = parse_count(before)
            after = fn(seen)
            return before if after == seen else format_count(after)

        self._slot.mutate(step)
        return seen
