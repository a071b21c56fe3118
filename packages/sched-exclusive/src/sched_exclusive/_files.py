"""The flock backend: ``cycle.lock`` and ``cycle.queued`` inside one directory.

The lock is :func:`sched_lock.try_lock` on ``dir/cycle.lock`` (which also
records the holder line the Go library's ``ReadHolder`` reads back); the
counter is a :class:`sched_lock.SlotFile` on ``dir/cycle.queued`` holding
``"N\\n"``, the Go library's format. Neither file is ever unlinked: removing a
locked file would let a concurrent opener lock a different inode.
"""

from __future__ import annotations

import typing
from collections.abc import Callable

from sched_lock import Lock, SlotFile, try_lock

from ._outcome import LOCK_NAME, QUEUE_NAME

__all__ = ["FileBackend", "format_count", "join", "parse_count"]

_INT64_MAX = 2**63 - 1
_SPACE = b" \t\n\r\v\f"


def parse_count(content: bytes) -> int:
    """Read a counter file's bytes as Go's ``strconv.Atoi(strings.TrimSpace(...))``.

    Args:
        content: the counter file's bytes.

    Returns:
        The count; empty, torn, negative, out-of-range or garbage content
        reads as zero (the self-healing rule every slot parser follows).
    """
    # Fast path: what this library and the Go library write ("N\n", N < 10**18).
    if 1 < len(content) < 20 and content[-1] == 10 and content[:-1].isdigit():
        return int(content[:-1])
    text = content.strip(_SPACE)
    digits = text[1:] if text[:1] in (b"+", b"-") else text
    if not digits.isdigit() or len(digits) > 19:  # bytes.isdigit: ASCII digits only
        return 0
    count = int(text)
    return count if 0 <= count <= _INT64_MAX else 0


def format_count(count: int) -> bytes:
    """Format ``count`` as the counter file holds it: decimal digits and a newline."""
    return b"%d\n" % count


def join(directory: str, name: str) -> str:
    """``directory/name`` (POSIX paths; cheaper than importing pathlib)."""
    return directory + name if directory.endswith("/") else f"{directory}/{name}"


def _unchanged(content: bytes) -> bytes:
    return content


@typing.final
class FileBackend:
    """:class:`._backend.Backend` over flock(2) files in one directory."""

    __slots__ = ("_lock_path", "_slot")

    def __init__(self, directory: str) -> None:
        self._lock_path = join(directory, LOCK_NAME)
        self._slot = SlotFile(join(directory, QUEUE_NAME))

    def try_acquire(self) -> Lock | None:
        return try_lock(self._lock_path)

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
