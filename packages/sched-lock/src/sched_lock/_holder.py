"""The holder line: one RFC 3339 UTC timestamp the lock holder records.

The Go library writes ``time.Now().UTC().Format(time.RFC3339Nano)`` and reads
it back with ``time.Parse(time.RFC3339Nano, strings.TrimSpace(content))``
from the file's first 64 bytes. :func:`format_holder_line` writes the same
bytes (nine fraction digits at most, trailing zeros trimmed, no fraction at
all on a whole second, then a newline) and :func:`parse_holder` reads what
Go's parser reads (Go 1.20 and later, as the Go library requires), which is
more than RFC 3339: a one-digit hour, a comma before the fraction, any
number of fraction digits (past the ninth ignored), offsets up to
``±24:60``, year 0000, and Unicode white space around the line (Go's
``TrimSpace``). Everything else, torn lines included, parses to ``None``.

Formatting is on the lock's hot path, so it uses ``time.gmtime`` and string
formatting rather than ``datetime``.
"""

from __future__ import annotations

import os
import stat
import time
from datetime import UTC, date, datetime, timedelta

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
_DAYS_PER_400_YEARS = 146_097
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_ORDINAL = _EPOCH.toordinal()
_MIN = datetime.min.replace(tzinfo=UTC)
_MAX = datetime.max.replace(tzinfo=UTC)
_MIN_SECONDS = (_MIN - _EPOCH) // timedelta(seconds=1)
_MAX_SECONDS = (_MAX - _EPOCH) // timedelta(seconds=1)


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


def _digits(text: bytes, start: int, count: int) -> int:
    """Parse exactly *count* ASCII digits at *start*, else -1."""
    part = text[start : start + count]
    return int(part) if len(part) == count and part.isdigit() else -1  # ASCII only


def _ordinal(year: int, month: int, day: int) -> int:
    """Days from 0001-01-01 (day 1) in the proleptic Gregorian calendar, year 0 included.

    Go's time reaches back past year 1 and ``datetime`` does not: year 0 is
    year 400 four hundred years (146,097 days) earlier, the calendar's period.

    Raises:
        ValueError: no such day (February 30th...).
    """
    if year == 0:
        return date(400, month, day).toordinal() - _DAYS_PER_400_YEARS
    return date(year, month, day).toordinal()


def _fields(text: bytes) -> tuple[int, int, int, int, int, int, int, bytes] | None:
    """Split Go's ``RFC3339Nano`` layout: the date, the time, microseconds, the rest.

    As Go's ``time.Parse`` reads it: four-digit year, two-digit month, day,
    minute and second, a one- or two-digit hour, an optional fraction after a
    period or a comma (digits past the sixth are dropped, past the ninth
    ignored, as Go since 1.20 does).
    """
    year, month, day = _digits(text, 0, 4), _digits(text, 5, 2), _digits(text, 8, 2)
    if text[4:5] != b"-" or text[7:8] != b"-" or text[10:11] != b"T":
        return None
    at = 11
    width = 2 if text[at + 1 : at + 2].isdigit() else 1  # Go's "15": one digit or two
    hour = _digits(text, at, width)
    at += width
    if text[at : at + 1] != b":" or text[at + 3 : at + 4] != b":":
        return None
    minute, second = _digits(text, at + 1, 2), _digits(text, at + 4, 2)
    at += 6
    if min(year, month, day, hour, minute, second) < 0:
        return None
    if not (1 <= month <= 12 and hour <= 23 and minute <= 59 and second <= 59):
        return None
    micro = 0
    if text[at : at + 1] in (b".", b","):
        end = at + 1
        while text[end : end + 1].isdigit():
            end += 1
        if end == at + 1:
            return None  # a separator without digits
        micro = int(text[at + 1 : end][:6].ljust(6, b"0"))
        at = end
    return year, month, day, hour, minute, second, micro, text[at:]


def _offset_seconds(text: bytes) -> int | None:
    """Parse ``Z`` or ``±hh:mm`` (the whole of *text*), as Go 1.20 and later do.

    Go reads two digits each and refuses an hour over 24 or a minute over 60
    ("some people do write offsets of 24 hours or 60 minutes"): ``+24:60`` is
    a valid offset of 25 hours there, and here.
    """
    if text == b"Z":
        return 0
    if len(text) != 6 or text[:1] not in (b"+", b"-") or text[3:4] != b":":
        return None
    hours, minutes = _digits(text, 1, 2), _digits(text, 4, 2)
    if not (0 <= hours <= 24 and 0 <= minutes <= 60):
        return None
    return (hours * 3600 + minutes * 60) * (-1 if text[:1] == b"-" else 1)


def parse_holder(content: bytes) -> datetime | None:
    """Parse a holder line as Go's ``time.Parse(time.RFC3339Nano, ...)`` does.

    Whatever Go reads, this reads, as the same instant: beyond RFC 3339 that
    is a one-digit hour, a comma before the fraction, an offset up to
    ``±24:60`` and the years 0000 and 9999 shifted past the ends of
    ``datetime`` by their offset. An instant ``datetime`` cannot hold (Go's
    year zero) is the nearest one it can: ``datetime.min`` or
    ``datetime.max``, in UTC. The holder is known, as it is to Go, and its
    age is at least the one given.

    Args:
        content: the lock file's bytes.

    Returns:
        The instant as an aware UTC ``datetime`` (microsecond precision, the
        nanoseconds truncated), or ``None`` when ``content`` is empty, torn or
        not a timestamp Go reads. It never raises for bad content.
    """
    text = content.strip()  # ASCII white space: Go's TrimSpace, for ASCII content
    if not text.isascii():  # Unicode white space too; an invalid byte stops the trim, as in Go
        text = (
            text.decode("utf-8", "surrogateescape")
            .strip(_GO_SPACE)
            .encode("utf-8", "surrogateescape")
        )
    fields = _fields(text)
    if fields is None:
        return None
    year, month, day, hour, minute, second, micro, rest = fields
    offset = _offset_seconds(rest)
    if offset is None:
        return None
    try:
        days = _ordinal(year, month, day) - _EPOCH_ORDINAL
    except ValueError:  # February 30th
        return None
    seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset
    if seconds < _MIN_SECONDS:
        return _MIN
    if seconds > _MAX_SECONDS:
        return _MAX
    return _EPOCH + timedelta(seconds=seconds, microseconds=micro)


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
