"""The flock backend: ``cycle.lock``, ``cycle.queued`` and ``cycle.fence`` in one directory.

The lock is :func:`sched_lock.try_lock` on ``dir/cycle.lock`` (which also
records the holder line the Go library's ``ReadHolder`` reads back); the
counter is a :class:`sched_lock.SlotFile` on ``dir/cycle.queued`` holding
``"N\\n"``, the Go library's format. No file is ever unlinked: removing a
locked file would let a concurrent opener lock a different inode.

``dir/cycle.fence`` is this library's own (the Go library never opens it):
the last fencing token drawn, one decimal line. Only a holder of the cycle
lock writes it, so it needs no lock of its own. Each cycle start reads it
and writes ``max(last + 1, microseconds since the epoch)`` in place, never
truncating first. Tokens follow the clock, so the file is what keeps them
increasing when the clock steps back; and a file that holds no token (a
missing file, another writer's bytes, a write cut short by a power cut, a
page cache lost with the machine) never lowers the next one, which then
continues from the clock (and says so once).
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from itertools import filterfalse
from operator import attrgetter

from sched_lock import Lock, SlotFile, try_lock

from ._backend import Change, Lease, Started
from ._compat import final
from ._outcome import LOCK_NAME, QUEUE_NAME

_BUSY = attrgetter("busy")

__all__ = [
    "FENCE_NAME",
    "FileBackend",
    "format_count",
    "join",
    "next_token",
    "parse_count",
]

#: The file holding the last fencing token drawn in the directory.
FENCE_NAME = "cycle.fence"
#: What a token read from ``cycle.fence`` may be at most: PostgreSQL's ``bigint``.
MAX_TOKEN = 2**63 - 1
# More than any token line (19 digits and a newline): longer content is garbage.
_FENCE_READ = 64
_FENCE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
_open = os.open
_close = os.close
_pread = os.pread
_pwrite = os.pwrite
_ftruncate = os.ftruncate
_time_ns = time.time_ns

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
    # Fast paths: what this library and the Go library write ("N\n", N < 10**18),
    # and a counter file that no request has written yet.
    if 1 < len(content) < 20 and content[-1] == 10 and content[:-1].isdigit():
        return int(content[:-1])
    if not content:
        return 0
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


def next_token(content: bytes, now_us: int) -> tuple[int, bool]:
    """The token that follows what ``cycle.fence`` holds.

    Args:
        content: the file's bytes (its first 64).
        now_us: the clock, in microseconds since the epoch.

    Returns:
        The next token, and whether ``content`` had to be recovered from
        (it was neither empty nor one decimal line): then the token is the
        clock's, which is above every token drawn before as long as the
        clock did not step back (tokens are drawn from it, and a cycle takes
        far longer than a microsecond).

    Raises:
        OverflowError: the token would not fit PostgreSQL's ``bigint``.
    """
    # Fast path: one decimal line, as written here.
    if 1 < len(content) < 21 and content[-1] == 10 and content[:-1].isdigit():
        token = max(int(content[:-1]) + 1, now_us)
        recovered = False
    else:
        token = max(now_us, 1)
        recovered = bool(content)
    if token > MAX_TOKEN:
        raise OverflowError(f"the next fencing token would pass {MAX_TOKEN}")
    return token, recovered


@final
class FileBackend:
    """:class:`._backend.Backend` over flock(2) files in one directory."""

    __slots__ = ("_dir", "_fence_path", "_lock_path", "_logger", "_slot", "_told")

    def __init__(self, directory: str, logger: logging.Logger) -> None:
        self._lock_path = join(directory, LOCK_NAME)
        self._slot = SlotFile(join(directory, QUEUE_NAME))
        self._fence_path = join(directory, FENCE_NAME)
        self._dir = directory
        self._logger = logger
        self._told = False  # the fence file's failure is logged once per instance

    def try_acquire(self) -> Lock | None:
        # A busy answer (it holds nothing) becomes None. The held lock is never
        # kept in a local, nor given to Python code (bool() would run one): an
        # interrupt as the call returns drops it at once, and its finalizer
        # releases it. filterfalse, attrgetter and Lock.busy all run in C.
        return next(filterfalse(_BUSY, (try_lock(self._lock_path),)), None)

    def read_counter(self, lease: Lease | None = None) -> int:
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

    def start(
        self,
        lease: Lease,
        change: Change,
        *,
        always: bool = False,
        seen: Callable[[int], None] | None = None,
    ) -> Started:
        # The token first: a crash between the two then burns a token (gaps
        # are allowed) instead of widening the window between the take and
        # the job's start.
        token = self._draw()
        try:
            if seen is None:
                before = self.update_counter(change)
            else:
                # A count to report is read first and reported before the change
                # commits, never under the counter's flock (a log handler must not
                # hold it). An empty counter needs no change: the read was all.
                before = self.read_counter()
                if before:
                    seen(before)
                    before = self.update_counter(change)
        except OSError as exc:
            return 0, token, exc
        return before, token, None

    def _draw(self) -> int | OSError:
        """Draw the next token from ``cycle.fence`` (under the cycle lock)."""
        path = self._fence_path
        try:
            fd = _open(path, _FENCE_FLAGS, 0o644)
            try:
                content = _pread(fd, _FENCE_READ, 0)
                token, recovered = next_token(content, _time_ns() // 1000)
                line = b"%d\n" % token
                written = _pwrite(fd, line, 0)
                while written < len(line):  # a short write: go on, so a failure shows its errno
                    written += _pwrite(fd, line[written:], written)
                if len(line) < len(content):  # only after recovering from garbage
                    _ftruncate(fd, len(line))
            finally:
                _close(fd)
        except (OSError, OverflowError) as exc:
            error = exc if isinstance(exc, OSError) else OSError(errno.EOVERFLOW, str(exc), path)
            if not self._told:
                self._told = True
                self._logger.warning(
                    "cycle fence not written; cycles run without a fencing token: %s",
                    error,
                    extra={"dir": self._dir, "error": str(error)},
                )
            return OSError(
                error.errno, f"no fencing token for this cycle ({path}): {error.strerror}", path
            )
        if recovered:
            self._logger.warning(
                "cycle fence file held no token (%d bytes of something else); "
                "continuing above anything it can have held, at %d",
                len(content),
                token,
                extra={"dir": self._dir, "sched_token": token},
            )
        return token
