"""read_holder and the holder line format: Go's RFC3339Nano, both ways."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sched_lock import read_holder
from sched_lock._holder import format_holder_line, parse_holder

Spawn = Callable[..., Any]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Nanoseconds since the epoch that fit a four-digit year (up to 9999-12-31).
NANOS = st.integers(min_value=0, max_value=253_402_300_799_999_999_999)


def go_format(ns: int, offset_minutes: int = 0, digits: int | None = None) -> bytes:
    """An independent model of Go's ``Format(time.RFC3339Nano)`` (digits=None)
    or of a fixed-digit RFC 3339 layout, at a given UTC offset."""
    seconds, fraction = divmod(ns, 10**9)
    local = EPOCH + timedelta(seconds=seconds, minutes=offset_minutes)
    text = local.strftime("%Y-%m-%dT%H:%M:%S")
    nine = f"{fraction:09d}"
    if digits is None:
        text += ("." + nine).rstrip("0").rstrip(".")
    elif digits:
        text += "." + nine[:digits]
    if offset_minutes == 0 and digits is None:
        return (text + "Z").encode()
    sign = "-" if offset_minutes < 0 else "+"
    hours, minutes = divmod(abs(offset_minutes), 60)
    return f"{text}{sign}{hours:02d}:{minutes:02d}".encode()


def as_datetime(ns: int, digits: int = 9) -> datetime:
    """The instant ``ns`` as read back: fraction cut to ``digits``, then to microseconds."""
    seconds, fraction = divmod(ns, 10**9)
    kept = fraction - fraction % 10 ** (9 - digits)
    return EPOCH + timedelta(seconds=seconds, microseconds=kept // 1000)


@pytest.mark.parametrize(
    ("ns", "line"),
    [
        (1_796_212_800_000_000_000, b"2026-12-02T12:00:00Z\n"),
        (1_796_212_800_500_000_000, b"2026-12-02T12:00:00.5Z\n"),
        (1_796_212_800_000_000_001, b"2026-12-02T12:00:00.000000001Z\n"),
        (1_796_212_800_123_456_780, b"2026-12-02T12:00:00.12345678Z\n"),
        (0, b"1970-01-01T00:00:00Z\n"),
    ],
)
def test_format_matches_go(ns: int, line: bytes) -> None:
    """Lines are Go's RFC3339Nano: UTC, trailing fraction zeros trimmed, then a newline."""
    assert line == format_holder_line(ns)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"2026-12-02T12:00:00Z", datetime(2026, 12, 2, 12, tzinfo=UTC)),
        (b"2026-12-02T12:00:00.5Z\n", datetime(2026, 12, 2, 12, 0, 0, 500_000, tzinfo=UTC)),
        (b"2026-12-02T12:00:00.123456789Z\n", datetime(2026, 12, 2, 12, 0, 0, 123_456, tzinfo=UTC)),
        (b"2026-12-02T14:00:00+02:00\n", datetime(2026, 12, 2, 12, tzinfo=UTC)),
        (b"2026-12-02T04:30:00.25-07:30\n", datetime(2026, 12, 2, 12, 0, 0, 250_000, tzinfo=UTC)),
        (b"2026-12-02T12:00:00-00:00", datetime(2026, 12, 2, 12, tzinfo=UTC)),
        (b"2027-01-01T01:00:00+13:00", datetime(2026, 12, 31, 12, tzinfo=UTC)),
        (b" \t\r\n2026-12-02T12:00:00Z \r\n\n", datetime(2026, 12, 2, 12, tzinfo=UTC)),
        # Go keeps reading digits past the ninth and ignores them.
        (
            b"2026-12-02T12:00:00.1234567891234Z",
            datetime(2026, 12, 2, 12, 0, 0, 123_456, tzinfo=UTC),
        ),
        (b"2024-02-29T00:00:00Z", datetime(2024, 2, 29, tzinfo=UTC)),
    ],
)
def test_parses_go_lines(line: bytes, expected: datetime) -> None:
    """Any RFC 3339 offset, 0-9 (or more) fraction digits and surrounding white space."""
    actual = parse_holder(line)
    assert expected == actual
    assert actual is not None
    assert UTC == actual.tzinfo


MIN = datetime.min.replace(tzinfo=UTC)
MAX = datetime.max.replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # A comma before the fraction, as Go reads it since 1.17.
        (b"2026-12-02T12:00:00,5Z", datetime(2026, 12, 2, 12, 0, 0, 500000, tzinfo=UTC)),
        (b"2026-12-02T12:00:00,123456789Z", datetime(2026, 12, 2, 12, 0, 0, 123456, tzinfo=UTC)),
        # Offsets up to 24 hours and 60 minutes ("some people do write" them, says Go).
        (b"2026-12-02T12:00:00+24:00", datetime(2026, 12, 1, 12, 0, tzinfo=UTC)),
        (b"2026-12-02T12:00:00-24:00", datetime(2026, 12, 3, 12, 0, tzinfo=UTC)),
        (b"2026-12-02T12:00:00+02:60", datetime(2026, 12, 2, 9, 0, tzinfo=UTC)),
        (b"2026-12-02T12:00:00.5+24:60", datetime(2026, 12, 1, 11, 0, 0, 500000, tzinfo=UTC)),
        # A one-digit hour (Go's layout "15").
        (b"2026-12-02T7:05:09Z", datetime(2026, 12, 2, 7, 5, 9, tzinfo=UTC)),
        # Year 0000 (leap, as in Go's proleptic calendar): in range once in UTC...
        (b"0000-12-31T23:00:00-02:00", datetime(1, 1, 1, 1, 0, tzinfo=UTC)),
        # ...or the nearest instant a datetime holds: known, and at least that old.
        (b"0000-01-01T00:00:00Z", MIN),
        (b"0000-02-29T12:00:00Z", MIN),
        (b"0001-01-01T00:00:00+00:01", MIN),
        (b"9999-12-31T23:59:59-00:01", MAX),
    ],
)
def test_reads_what_go_reads_beyond_rfc3339(line: bytes, expected: datetime) -> None:
    """The spellings Go's parser reads that RFC 3339 does not: the same instant, or the
    nearest one a datetime can hold (cross-checked against Go in test_go_interop)."""
    assert expected == parse_holder(line)


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"\n",
        b"   \n\t",
        b"2026-12-02T12:00",  # torn
        b"2026-12-02T12:00:00",  # no offset
        b"2026-12-02T12:00:00.",  # a dot without digits
        b"2026-12-02T12:00:00.Z",
        b"2026-12-02t12:00:00Z",
        b"2026-12-02T12:00:00z",
        b"2026-12-02 12:00:00Z",
        b"2026-13-02T12:00:00Z",
        b"2026-02-30T12:00:00Z",
        b"2025-02-29T12:00:00Z",
        b"2026-12-02T24:00:00Z",
        b"2026-12-02T12:60:00Z",
        b"2026-12-02T12:00:60Z",  # Go rejects leap seconds too
        b"2026-12-02T12:00:00+25:00",  # Go refuses an offset over 24 hours
        b"2026-12-02T12:00:00+02:61",  # or over 60 minutes
        b"2026-12-02T12:00:00+2:00",
        b"2026-12-02T12:00:00,Z",
        b"2026-12-02T012:00:00Z",
        b"2026-12-02T12:0:00Z",
        b"0000-02-30T00:00:00Z",
        b"2026-12-02T12:00:00+0200",
        b"2026-12-02T12:00:00+02",
        b"+026-12-02T12:00:00Z",
        b"2026-1-02T12:00:00Z",
        b"2026-12-02T12:00:00Z\n2026-12-02T12:00:00Z\n",  # two lines
        b"2026-12-02T12:00:00.5Z\n00Z\n",  # a shorter line over a longer one, uncut
        b"\xff\xfe2026-12-02T12:00:00Z",
        "\uff12\uff10\uff12\uff16-12-02T12:00:00Z".encode(),  # fullwidth digits
        b"2026-12-02T12:00:00\xd9\xa0Z",
        b"garbage",
    ],
)
def test_garbage_is_none(line: bytes) -> None:
    """Torn, malformed or out-of-range content is unknown: None, never an exception."""
    assert parse_holder(line) is None


@given(NANOS)
@example(0)
@example(253_402_300_799_999_999_999)
def test_format_parse_round_trip(ns: int) -> None:
    """Formatting then parsing gives the instant back (to the microsecond, truncated)."""
    line = format_holder_line(ns)
    assert go_format(ns) + b"\n" == line
    assert as_datetime(ns) == parse_holder(line)


@given(NANOS, st.lists(st.integers(min_value=0, max_value=10**9 - 1), min_size=1, max_size=5))
def test_same_second_lines(ns: int, fractions: list[int]) -> None:
    """Lines formatted within one second (the cached date part) stay exact."""
    base = ns - ns % 10**9
    for fraction in [*fractions, 0, *fractions]:
        assert go_format(base + fraction) + b"\n" == format_holder_line(base + fraction)


@given(
    st.integers(min_value=86_400 * 10**9, max_value=253_402_214_400 * 10**9),  # a day's margin
    st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59),
    st.integers(min_value=0, max_value=9),
)
def test_parses_any_offset_and_digit_count(ns: int, offset: int, digits: int) -> None:
    """A line in any offset with 0-9 fraction digits reads as the same instant."""
    assert as_datetime(ns, digits) == parse_holder(go_format(ns, offset, digits))


@given(st.binary(max_size=64))
def test_never_raises_on_bytes(content: bytes) -> None:
    """Arbitrary bytes parse to None or an aware UTC datetime, never an exception."""
    result = parse_holder(content)
    assert result is None or result.tzinfo is UTC


@given(NANOS, st.data())
def test_torn_lines_are_none(ns: int, data: st.DataObject) -> None:
    """Every proper prefix of a line that stops before its Z is unknown."""
    line = format_holder_line(ns)
    cut = data.draw(st.integers(min_value=0, max_value=len(line) - 2))
    assert parse_holder(line[:cut]) is None


@given(st.text(alphabet="0123456789-:.TZ+ \n", max_size=40))
def test_never_raises_on_near_misses(text: str) -> None:
    """Strings built from the format's own characters never raise either."""
    result = parse_holder(text.encode())
    assert result is None or result.tzinfo is UTC


def test_read_holder_absent_is_none(tmp_path: Path) -> None:
    """An absent file (or directory) reads as None."""
    assert read_holder(tmp_path / "absent") is None
    assert read_holder(str(tmp_path / "absent" / "cycle.lock")) is None


def test_read_holder_reads_file(tmp_path: Path) -> None:
    """read_holder parses the file's line, a Go holder's with an offset included."""
    path = tmp_path / "cycle.lock"
    path.write_bytes(b"2026-12-02T14:00:00.123456789+02:00\n")
    assert datetime(2026, 12, 2, 12, 0, 0, 123_456, tzinfo=UTC) == read_holder(path)
    path.write_bytes(b"")
    assert read_holder(path) is None


LINE = b"2026-12-02T12:00:00Z"
WHEN = datetime(2026, 12, 2, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (LINE + b" " * 70_000, WHEN),  # Go reads the first 64 bytes: the line, then spaces
        (LINE + b"\n" + b"garbage" * 20, None),  # the garbage is within the 64
        (b" " * 44 + LINE, WHEN),  # exactly 64 bytes
        (b" " * 45 + LINE, None),  # cut at 64: torn
        ("\u00a0\u3000".encode() + LINE + "\u0085\u2028\n".encode(), WHEN),  # Go's TrimSpace
        ("\u200b".encode() + LINE, None),  # a zero-width space is not white space
        (b"\x1c" + LINE, None),  # nor is an ASCII file separator
    ],
)
def test_read_holder_reads_the_first_64_bytes_as_go(
    tmp_path: Path, content: bytes, expected: datetime | None
) -> None:
    """read_holder reads what Go's ReadHolder reads: the first 64 bytes, trimmed of
    Unicode white space (strings.TrimSpace), then parsed."""
    path = tmp_path / "cycle.lock"
    path.write_bytes(content)
    assert expected == read_holder(path)


def test_read_holder_never_raises(tmp_path: Path) -> None:
    """Observability only: a directory, a path through a file, a FIFO (never blocking
    for a writer), a socket or a device reads as unknown, as in Go."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "file").write_bytes(b"")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "socket"))
        for path in [tmp_path, tmp_path / "file" / "cycle.lock", fifo, tmp_path / "socket"]:
            assert read_holder(path) is None, path
    assert read_holder("/dev/zero") is None
    assert read_holder("nul\0byte") is None


def test_read_holder_permission_is_unknown(
    world_dir: str, spawn: Spawn, drop_privileges: str
) -> None:
    """An unreadable lock file reads as unknown, as in Go."""
    path = f"{world_dir}/cycle.lock"
    Path(path).write_bytes(b"2026-12-02T12:00:00Z\n")
    Path(path).chmod(0o600)
    code = f"""
from sched_lock import read_holder
{drop_privileges}
print(read_holder({path!r}))
"""
    child = spawn(code)
    assert "None" == child.read_line()
    assert 0 == child.wait()


def test_aware_utc_result() -> None:
    """The result is aware and in UTC whatever offset the line used."""
    result = parse_holder(b"2026-12-02T14:00:00+02:00")
    assert result is not None
    assert timedelta(0) == result.utcoffset()
    assert result.tzinfo is UTC
