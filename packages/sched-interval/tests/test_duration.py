"""parse_duration and format_duration against Go's own answers and the issue's examples."""

from __future__ import annotations

import base64
import json
import pickle
from datetime import timedelta
from pathlib import Path

import pytest

from sched_interval import (
    MAX_DURATION_NS,
    MIN_DURATION_NS,
    DurationParseError,
    IntervalError,
    format_duration,
    parse_duration,
)
from sched_interval._goduration import go_quote, timedelta_from_ns

VECTORS = json.loads(
    (Path(__file__).parent / "go_vectors" / "vectors.json").read_text(encoding="ascii")
)
H = 3_600_000_000_000
M = 60_000_000_000
S = 1_000_000_000


def _go_text(b64: str) -> str:
    """A Go input string as Python sees it (os.environ decodes with surrogateescape)."""
    return base64.b64decode(b64).decode("utf-8", "surrogateescape")


def test_parse_matches_go_vectors() -> None:
    """Every input Go's time.ParseDuration was asked gives Go's value or Go's exact message."""
    mismatches = []
    for entry in VECTORS["parse"]:
        text = _go_text(entry["in"])
        expected = ("ns", entry["ns"]) if "ns" in entry else ("err", entry["err"])
        try:
            actual: tuple[str, object] = ("ns", parse_duration(text))
        except ValueError as exc:
            actual = ("err", str(exc))
        if expected != actual:
            mismatches.append((text, expected, actual))
    assert [] == mismatches
    assert len(VECTORS["parse"]) > 2000


def test_format_matches_go_vectors() -> None:
    """format_duration agrees with Go's Duration.String on every recorded value."""
    mismatches = [
        (entry["ns"], entry["out"], format_duration(entry["ns"]))
        for entry in VECTORS["format"]
        if entry["out"] != format_duration(entry["ns"])
    ]
    assert [] == mismatches


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1h30m", H + 30 * M),
        ("1.5h", H + 30 * M),
        (".5s", S // 2),
        ("5.s", 5 * S),
        ("+5s", 5 * S),
        ("-1.5h", -(H + 30 * M)),
        ("1µs", 1_000),  # U+00B5 MICRO SIGN
        ("1μs", 1_000),  # U+03BC GREEK SMALL LETTER MU
        ("1us", 1_000),
        ("1ns", 1),
        ("1ms", 1_000_000),
        ("300ms", 300_000_000),
        ("2h45m", 2 * H + 45 * M),
        ("9223372036854775807ns", MAX_DURATION_NS),
        ("2562047h47m16.854775807s", MAX_DURATION_NS),
        ("-9223372036854775808ns", MIN_DURATION_NS),
        ("0", 0),
        ("-0", 0),
        ("+0", 0),
        ("0s", 0),
        ("0h0m", 0),
        ("1h1h", 2 * H),
        ("1.0000000001h", H + 360),
        # Go's float64 fraction arithmetic, not exact decimal truncation:
        ("0.3333333333333333333333333h", 20 * M),
        ("1.9999999999999999999999s", 2 * S),
        (".000000001s", 1),
        ("1.9999999999ns", 1),  # fractions of a nanosecond truncate
    ],
)
def test_parse_examples(text: str, expected: int) -> None:
    """The issue's examples parse to the nanoseconds Go gives."""
    assert expected == parse_duration(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("banana", 'time: invalid duration "banana"'),
        ("1", 'time: missing unit in duration "1"'),
        ("1H", 'time: unknown unit "H" in duration "1H"'),
        ("1 h", 'time: unknown unit " h" in duration "1 h"'),
        ("1d", 'time: unknown unit "d" in duration "1d"'),
        (".", 'time: invalid duration "."'),
        ("", 'time: invalid duration ""'),
        ("-", 'time: invalid duration "-"'),
        (".s", 'time: invalid duration ".s"'),
        ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
        ("2562048h", 'time: invalid duration "2562048h"'),
        ("-9223372036854775809ns", 'time: invalid duration "-9223372036854775809ns"'),
        (" 1s", 'time: invalid duration " 1s"'),
        ("1e3s", 'time: unknown unit "e" in duration "1e3s"'),
        ("1µ", 'time: unknown unit "\\xc2\\xb5" in duration "1\\xc2\\xb5"'),
        ('1"\\', 'time: unknown unit "\\"\\\\" in duration "1\\"\\\\"'),
        ("1\x1cs", 'time: unknown unit "\\x1cs" in duration "1\\x1cs"'),
        ("1\udcffs", 'time: unknown unit "\\xffs" in duration "1\\xffs"'),
        ("１s", 'time: invalid duration "\\xef\\xbc\\x91s"'),  # noqa: RUF001 - fullwidth
    ],
)
def test_parse_errors_quote_like_go(text: str, message: str) -> None:
    """Invalid input raises DurationParseError (a ValueError) carrying Go's message."""
    with pytest.raises(DurationParseError) as info:
        parse_duration(text)
    assert message == str(info.value)
    assert text == info.value.text
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, IntervalError)


def test_parse_sum_wraps_like_go_uint64() -> None:
    """Go adds the parts in uint64: two parts of 1<<63 ns wrap to zero instead of failing."""
    assert 0 == parse_duration("9223372036854775808ns9223372036854775808ns")
    assert S == parse_duration("9223372036854775808ns9223372036854775808ns1s")


def test_parse_rejects_huge_digit_runs_without_int_limits() -> None:
    """Thousands of digits are an overflow error, not Python's int-conversion limit."""
    with pytest.raises(DurationParseError):
        parse_duration("9" * 10_000 + "s")
    assert 1 == parse_duration("0" * 10_000 + "1ns")
    assert 1 == parse_duration("1." + "0" * 10_000 + "ns")


def test_parse_rejects_non_str() -> None:
    """Only a str is a duration string."""
    with pytest.raises(TypeError):
        parse_duration(b"1s")  # type: ignore[arg-type]


def test_duration_parse_error_pickles() -> None:
    """The error survives a round trip between processes, text included."""
    with pytest.raises(DurationParseError) as info:
        parse_duration("1x")
    clone = pickle.loads(pickle.dumps(info.value))
    assert str(info.value) == str(clone)
    assert "1x" == clone.text


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "0s"),
        (1, "1ns"),
        (1_500, "1.5µs"),
        (300_000_000, "300ms"),
        (1_500_000_000, "1.5s"),
        (H + 30 * M, "1h30m0s"),
        (6 * H, "6h0m0s"),
        (-(2 * M + 3 * S), "-2m3s"),
        (-1, "-1ns"),
        (MAX_DURATION_NS, "2562047h47m16.854775807s"),
        (MIN_DURATION_NS, "-2562047h47m16.854775808s"),
        (timedelta(hours=1, minutes=30), "1h30m0s"),
        (timedelta(microseconds=1), "1µs"),
        (timedelta(microseconds=-1500), "-1.5ms"),
        (timedelta(0), "0s"),
    ],
)
def test_format_examples(value: int | timedelta, expected: str) -> None:
    """format_duration writes Go's Duration.String form, for ints and timedeltas."""
    assert expected == format_duration(value)


@pytest.mark.parametrize(
    "value", [MAX_DURATION_NS + 1, MIN_DURATION_NS - 1, timedelta(days=106_752), True]
)
def test_format_rejects_out_of_range(value: int | timedelta) -> None:
    """Values Go's int64 Duration cannot hold, and bools, raise ValueError."""
    with pytest.raises(ValueError):  # noqa: PT011 - the type is the contract
        format_duration(value)


def test_format_rejects_floats() -> None:
    """A float is ambiguous (seconds? nanoseconds?): TypeError."""
    with pytest.raises(TypeError):
        format_duration(1.5)  # type: ignore[arg-type]


def test_the_rounded_ends_of_gos_range_format_and_nothing_beyond() -> None:
    """The microsecond the ends of Go's range round to formats; one more is out of range."""
    top = timedelta(microseconds=9_223_372_036_854_776)
    assert "2562047h47m16.854776s" == format_duration(top)
    assert "-2562047h47m16.854776s" == format_duration(-top)
    for beyond in (top + timedelta(microseconds=1), -top - timedelta(microseconds=1)):
        with pytest.raises(ValueError, match="outside the range"):
            format_duration(beyond)
    with pytest.raises(ValueError, match="outside the range"):
        format_duration(MAX_DURATION_NS + 1)


@pytest.mark.parametrize(
    ("ns", "expected"),
    [
        (1, timedelta(microseconds=1)),
        (499, timedelta(microseconds=1)),
        (500, timedelta(microseconds=1)),
        (1_499, timedelta(microseconds=1)),
        (1_500, timedelta(microseconds=2)),
        (2_500, timedelta(microseconds=2)),
        (2_501, timedelta(microseconds=3)),
        (0, timedelta(0)),
        (-1_500, timedelta(microseconds=-2)),
        (MAX_DURATION_NS, timedelta(microseconds=9_223_372_036_854_776)),
        (MIN_DURATION_NS, timedelta(microseconds=-9_223_372_036_854_776)),
    ],
)
def test_timedelta_from_ns_rounds_half_even_and_never_to_zero(ns: int, expected: timedelta) -> None:
    """Nanoseconds become microseconds by rounding half to even; a positive value stays positive.

    At the ends of Go's range too: 9223372036854775807 ns is nearer 9223372036854776 µs.
    """
    assert expected == timedelta_from_ns(ns)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("abc", '"abc"'),
        ("", '""'),
        ('a"b\\c', '"a\\"b\\\\c"'),
        ("\x7f", '"\x7f"'),
        ("\t", '"\\x09"'),
        ("é", '"\\xc3\\xa9"'),
        ("\ufffd", '"\\xef\\xbf\\xbd"'),
        ("\udc80", '"\\x80"'),
        ("\ud800", '"\\xed\\xa0\\x80"'),
    ],
)
def test_go_quote(text: str, expected: str) -> None:
    """Quoting follows Go's time.quote byte for byte (surrogate escapes are the raw bytes)."""
    assert expected == go_quote(text)
