"""The holder line: one RFC 3339 UTC timestamp the lock holder records.

The Go library writes ``time.Now().UTC().Format(time.RFC3339Nano)`` and reads
it back with ``time.Parse(time.RFC3339Nano, strings.TrimSpace(content))``
from the file's first 64 bytes. :func:`format_holder_line` writes the same
bytes (nine fraction digits at most, trailing zeros trimmed, no fraction at
all on a whole second, then a newline) and :func:`parse_holder` accepts what
Go's RFC 3339 parser accepts: any ``Z`` or ``±hh:mm`` offset, any number of
fraction digits (digits past the ninth are ignored, as in Go), Unicode white
space around the line (Go's ``TrimSpace``). Everything else, torn lines
included, parses to ``None``.

Formatting is on the lock's hot path, so it uses ``time.gmtime`` and string
formatting rather than ``datetime``.
"""

from __future__ import annotations

import os
import stat
import time
from datetime import UTC, datetime, timedelta

_NS = 1_000_000_000
# Go's ReadHolder reads this much of the file, from its start.
_HOLDER_READ = 64
# What Go's strings.TrimSpace trims (unicode.IsSpace): ASCII white space,
# U+0085, U+00A0 and the other Unicode White_Space characters.
_GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


# The last second formatted and its "YYYY-MM-DDTHH:MM:SS" text: a lock taken
# again within the same second skips gmtime and the date formatting. One
# tuple, replaced whole, so threads never see a half-updated pair.
_last_second: list[tuple[int, bytes]] = [(-1, b"")]


def format_holder_line(ns: int) -> bytes:
    """Format ``ns`` nanoseconds since the epoch as Go's ``RFC3339Nano`` line.

    Args:
        ns: nanoseconds since the Unix epoch, as from ``time.time_ns()``.

    Returns:
        ASCII bytes such as ``b"2026-12-02T12:00:00.5Z\\n"``.
    """
    seconds, fraction = divmod(ns, _NS)
    cached_second, prefix = _last_second[0]
    if cached_second != seconds:
        prefix = b"%04d-%02d-%02dT%02d:%02d:%02d" % time.gmtime(seconds)[:6]
        _last_second[0] = (seconds, prefix)
    if fraction:
        return b"%s.%sZ\n" % (prefix, (b"%09d" % fraction).rstrip(b"0"))
    return prefix + b"Z\n"


def _number(text: bytes, start: int, end: int, low: int, high: int) -> int:
    """Parse ``text[start:end]`` as decimal digits in ``[low, high]``, else -1."""
    part = text[start:end]
    if len(part) != end - start or not part.isdigit():  # bytes.isdigit is ASCII only
        return -1
    value = int(part)
    return value if low <= value <= high else -1


def _date_time(text: bytes) -> tuple[int, int, int, int, int, int] | None:
    """Parse ``YYYY-MM-DDTHH:MM:SS`` at the start of ``text``."""
    if text[4:5] != b"-" or text[7:8] != b"-" or text[10:11] != b"T":
        return None
    if text[13:14] != b":" or text[16:17] != b":":
        return None
    fields = (
        _number(text, 0, 4, 1, 9999),  # datetime has no year 0, and Go never writes one
        _number(text, 5, 7, 1, 12),
        _number(text, 8, 10, 1, 31),  # the month's real length is datetime's to check
        _number(text, 11, 13, 0, 23),
        _number(text, 14, 16, 0, 59),
        _number(text, 17, 19, 0, 59),
    )
    return None if min(fields) < 0 else fields


def _fraction(text: bytes) -> tuple[int, bytes] | None:
    """Parse an optional ``.digits`` into microseconds, and return the rest."""
    if text[:1] != b".":
        return 0, text
    end = 1
    while text[end : end + 1].isdigit():
        end += 1
    if end == 1:
        return None
    return int(text[1:end][:6].ljust(6, b"0")), text[end:]


def _offset_minutes(text: bytes) -> int | None:
    """Parse ``Z`` or ``+hh:mm`` / ``-hh:mm`` (the whole of ``text``)."""
    if text == b"Z":
        return 0
    if len(text) != 6 or text[:1] not in (b"+", b"-") or text[3:4] != b":":
        return None
    hours = _number(text, 1, 3, 0, 23)
    minutes = _number(text, 4, 6, 0, 59)
    if hours < 0 or minutes < 0:
        return None
    return (hours * 60 + minutes) * (-1 if text[:1] == b"-" else 1)


def parse_holder(content: bytes) -> datetime | None:
    """Parse a holder line as Go's ``time.Parse(time.RFC3339Nano, ...)`` does.

    Args:
        content: the lock file's bytes.

    Returns:
        The instant as an aware UTC ``datetime`` (microsecond precision, the
        nanoseconds truncated), or ``None`` when ``content`` is empty, torn or
        not an RFC 3339 timestamp. It never raises for bad content.
    """
    text = content.strip()  # ASCII white space: Go's TrimSpace, for ASCII content
    if not text.isascii():  # Unicode white space too; an invalid byte stops the trim, as in Go
        text = (
            text.decode("utf-8", "surrogateescape")
            .strip(_GO_SPACE)
            .encode("utf-8", "surrogateescape")
        )
    fields = _date_time(text)
    fraction = _fraction(text[19:])
    if fields is None or fraction is None:
        return None
    micro, rest = fraction
    offset = _offset_minutes(rest)
    if offset is None:
        return None
    try:
        local = datetime(*fields, micro, tzinfo=UTC)
        return local - timedelta(minutes=offset)
    except (ValueError, OverflowError):  # February 30th, or past datetime's range
        return None


def read_holder(path: str | os.PathLike[str]) -> datetime | None:
    """Read when the current holder of the lock at ``path`` acquired it.

    The value is for observability (how long has the run been going?) and is
    meaningful only while the lock is held; it never affects locking, and
    reading it never fails, as with the Go library's ``ReadHolder``: the
    first 64 bytes of the file are read and trimmed of white space, so a line
    Go reads as unknown reads as unknown here. It reads lines written by this
    package and by the Go library alike, and never blocks (a FIFO in place of
    the file is unknown at once).

    Args:
        path: the lock file.

    Returns:
        The acquisition time as a timezone-aware UTC ``datetime``, or ``None``
        (unknown) when the file is absent, empty, torn or holds garbage, or
        cannot be opened or read, or is not a regular file.
    """
    name = os.fspath(path)
    try:
        fd = os.open(name, _READ_FLAGS)  # O_NONBLOCK: a FIFO must not wait for a writer
    except (OSError, ValueError):  # absent, refused, a socket, a NUL in the path...
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        content = os.pread(fd, _HOLDER_READ, 0)  # Go's ReadAt(buf[:64], 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    return parse_holder(content)
