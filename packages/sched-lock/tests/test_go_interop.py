"""Differential tests against Go's own time package (skipped where Go is absent).

The Go library writes the holder line with ``Format(time.RFC3339Nano)`` and
reads it with ``time.Parse(time.RFC3339Nano, strings.TrimSpace(...))``. A
small standard-library Go program (``go_read_holder.go``, built offline) plays
that reader, so these tests pin that our lines read back exactly in Go and that
we read RFC 3339 lines exactly as Go does.

Go's parser is more lenient than RFC 3339 (a one-digit hour, a comma before
the fraction, offsets up to ±24:60, year 0000), and we read what it reads. So
the checks are: every RFC 3339 line and every such spelling reads as the same
instant on both sides (or, past the ends of ``datetime``, as the nearest one
it holds), and whatever we accept, Go accepts as the same instant. Go before
1.20 differs from the Go the library requires (1.27) in two ways these checks
leave out: it refuses more than nine fraction digits, and it reads offsets up
to ±99:99.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from sched_testing import find_go, hex_lines

from sched_lock import read_holder
from sched_lock._holder import format_holder_line, parse_holder

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Go's unicode.IsSpace, and two look-alikes it does not trim.
GO_SPACE = " \t\r\n\v\f\x85\xa0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000"
NOT_SPACE = "\u200b\x1c"
GoParse = Callable[[bytes], "tuple[int, int] | None"]


@pytest.fixture(scope="module")
def go_parse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GoParse]:
    """Go's reading of a holder line: (seconds, nanoseconds) or None."""
    # Any Go reads these files the same way: the oldest still packaged (1.19) will do.
    binary = find_go(minimum=(1, 19)).build(
        Path(__file__).with_name("go_read_holder.go"), tmp_path_factory.mktemp("go")
    )
    with hex_lines(binary) as ask:

        def parse(line: bytes) -> tuple[int, int] | None:
            answer = ask(line).split()
            if answer == [b"none"]:
                return None
            seconds, nanos = answer
            return int(seconds), int(nanos)

        yield parse


MIN = datetime.min.replace(tzinfo=UTC)
MAX = datetime.max.replace(tzinfo=UTC)


def as_datetime(instant: tuple[int, int]) -> datetime:
    """Go's instant as we read it: to the microsecond, truncated; past the ends of
    ``datetime`` (Go's year zero), the nearest instant it holds."""
    seconds, nanos = instant
    if seconds < (MIN - EPOCH) // timedelta(seconds=1):
        return MIN
    if seconds > (MAX - EPOCH) // timedelta(seconds=1):
        return MAX
    return EPOCH + timedelta(seconds=seconds, microseconds=nanos // 1000)


@given(st.integers(min_value=0, max_value=253_402_300_799_999_999_999))
def test_go_reads_our_lines_exactly(go_parse: GoParse, ns: int) -> None:
    """Every line we write reads back in Go as the same instant, to the nanosecond."""
    assert divmod(ns, 10**9) == go_parse(format_holder_line(ns))


@st.composite
def rfc3339_lines(draw: st.DrawFn) -> bytes:
    """RFC 3339 date-times with any offset, 0-9 fraction digits and white space."""
    moment = draw(st.datetimes(min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31)))
    digits = draw(st.integers(0, 9))
    fraction = "." + draw(st.text("0123456789", min_size=digits, max_size=digits))
    offset = draw(st.integers(-(23 * 60 + 59), 23 * 60 + 59))
    if offset == 0 and draw(st.booleans()):
        zone = "Z"
    else:
        hours, minutes = divmod(abs(offset), 60)
        zone = f"{'-' if offset < 0 else '+'}{hours:02d}:{minutes:02d}"
    space = st.text(GO_SPACE, max_size=3)
    text = f"{moment.year:04d}-{moment:%m-%dT%H:%M:%S}{fraction if digits else ''}{zone}"
    return (draw(space) + text + draw(space)).encode()


@given(rfc3339_lines())
def test_we_read_rfc3339_as_go_does(go_parse: GoParse, line: bytes) -> None:
    """Any RFC 3339 line reads as the same instant on both sides."""
    expected = go_parse(line)
    assert expected is not None, line
    assert as_datetime(expected) == parse_holder(line)


@st.composite
def go_spellings(draw: st.DrawFn) -> bytes:
    """Date-times in the spellings Go reads beyond RFC 3339: a one-digit hour, a comma
    before the fraction, offsets up to ±24:60, any year from 0000, any day up to 31
    (Go refuses February 30th; so must we)."""
    year, month, day = (
        draw(st.integers(0, 9999)),
        draw(st.integers(1, 12)),
        draw(st.integers(1, 31)),
    )
    hour = draw(st.integers(0, 23))
    hour_text = str(hour) if hour < 10 and draw(st.booleans()) else f"{hour:02d}"
    minute, second = draw(st.integers(0, 59)), draw(st.integers(0, 59))
    digits = draw(st.integers(0, 9))
    fraction = draw(st.sampled_from(".,")) + draw(
        st.text("0123456789", min_size=digits, max_size=digits)
    )
    hours, minutes = draw(st.integers(0, 24)), draw(st.integers(0, 60))
    zone = draw(
        st.sampled_from(["Z", f"+{hours:02d}:{minutes:02d}", f"-{hours:02d}:{minutes:02d}"])
    )
    text = (
        f"{year:04d}-{month:02d}-{day:02d}T{hour_text}:{minute:02d}:{second:02d}"
        f"{fraction if digits else ''}{zone}"
    )
    return text.encode()


@given(go_spellings())
@example(b"2026-12-02T12:00:00,5Z")
@example(b"2026-12-02T12:00:00+24:00")
@example(b"0000-01-01T00:00:00Z")
@example(b"0000-12-31T23:00:00-02:00")
@example(b"9999-12-31T23:59:59-24:60")
def test_we_read_what_go_reads_beyond_rfc3339(go_parse: GoParse, line: bytes) -> None:
    """Go's own spellings read as Go reads them: the same instant (the nearest one a
    datetime holds, for Go's year zero), or unknown on both sides."""
    expected = go_parse(line)
    assert (None if expected is None else as_datetime(expected)) == parse_holder(line), line


def nine_digits_at_most(line: bytes) -> bool:
    """Whether every run of digits after a dot is nine digits or fewer."""
    for part in line.split(b".")[1:]:
        run = len(part) - len(part.lstrip(b"0123456789"))
        if run > 9:
            return False
    return True


@given(
    st.one_of(
        st.text("0123456789-:.,TZtz+ \n", max_size=40).map(str.encode),
        rfc3339_lines().flatmap(
            lambda line: st.integers(0, len(line)).flatmap(
                lambda at: st.sampled_from([b"", b"0", b":", b"-", b".", b"Z", b"+"]).map(
                    lambda junk: line[:at] + junk + line[at + 1 :]
                )
            )
        ),
    )
)
def test_whatever_we_accept_go_accepts(go_parse: GoParse, line: bytes) -> None:
    """We never read a line Go would not, nor read it as another instant."""
    ours = parse_holder(line)
    if ours is not None and nine_digits_at_most(line):
        expected = go_parse(line)
        assert expected is not None, line
        assert as_datetime(expected) == ours


@pytest.fixture(scope="module")
def holder_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One lock file the read_holder properties rewrite."""
    return tmp_path_factory.mktemp("holder") / "cycle.lock"


@given(
    rfc3339_lines(),
    st.text(GO_SPACE + NOT_SPACE, max_size=40),
    st.text(GO_SPACE + NOT_SPACE, max_size=40),
)
def test_read_holder_reads_a_file_as_go(
    go_parse: GoParse, holder_file: Path, line: bytes, before: str, after: str
) -> None:
    """read_holder reads a lock file as Go's ReadHolder does: its first 64 bytes,
    trimmed of Unicode white space, parsed (or unknown)."""
    content = before.encode() + line + after.encode()
    holder_file.write_bytes(content)
    expected = go_parse(content[:64])
    assert (None if expected is None else as_datetime(expected)) == read_holder(holder_file)
