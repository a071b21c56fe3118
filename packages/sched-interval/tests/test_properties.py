"""Hypothesis properties of the duration grammar and of parse_interval.

The differential property checks parse_duration against `model_parse`, an
independent model of Go's grammar written here: a regular expression splits
the text into terms, and exact integer arithmetic does the rest. The only
thing it shares with the implementation is Go's float64 formula for a
fraction, which is the definition of how Go rounds one.
"""

from __future__ import annotations

import itertools
import logging
import re
from datetime import timedelta
from fractions import Fraction

from hypothesis import example, given
from hypothesis import strategies as st

from sched_interval import (
    MAX_DURATION_NS,
    MIN_DURATION_NS,
    DurationParseError,
    Mode,
    format_duration,
    parse_duration,
    parse_interval,
)
from sched_interval._goduration import timedelta_from_ns

_names = itertools.count()

# --- the independent model -------------------------------------------------------------------

UNITS = {
    "ns": 1,
    "us": 10**3,
    "\u00b5s": 10**3,
    "\u03bcs": 10**3,
    "ms": 10**6,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}
TERM = re.compile(r"(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?(?P<unit>[^0-9.]*)")
LIMIT = 2**63


def _quote(text: str) -> str:
    """Go's time.quote, from its documentation: escape every byte outside printable ASCII."""
    raw = bytearray()
    for ch in text:
        if 0xDC80 <= ord(ch) <= 0xDCFF:  # os.environ's escape for an undecodable byte
            raw.append(ord(ch) - 0xDC00)
        else:
            raw += ch.encode("utf-8", "surrogatepass")
    body = ""
    for b in raw:
        if b < 0x20 or b >= 0x80:
            body += f"\\x{b:02x}"
        elif chr(b) in '"\\':
            body += "\\" + chr(b)
        else:
            body += chr(b)
    return f'"{body}"'


def _fraction_ns(digits: str, unit: int) -> int:
    """Go's rounding of a fraction: the digits it accumulates, then its float64 formula."""
    kept = 0
    # Go keeps digits while the accumulated value stays at most 2**63.
    while kept < len(digits) and int(digits[: kept + 1]) <= LIMIT:
        kept += 1
    value = int(digits[:kept]) if kept else 0
    if value == 0:
        return 0
    scale = 1.0
    for _ in range(kept):
        scale *= 10
    return int(float(value) * (float(unit) / scale))


def model_parse(text: str) -> int | str:  # noqa: PLR0911 - one return per Go error
    """Nanoseconds, or Go's error message, for *text*."""
    invalid = f"time: invalid duration {_quote(text)}"
    body = text[1:] if text[:1] in ("-", "+") else text
    negative = text[:1] == "-"
    if body == "0":
        return 0
    if not body:
        return invalid
    total = 0
    pos = 0
    while pos < len(body):
        term = TERM.match(body, pos)
        assert term is not None  # the pattern matches the empty string
        whole, frac, unit = term["int"], term["frac"], term["unit"]
        if not whole and frac is None:
            return invalid  # a term must start with a digit or '.'
        if whole and int(whole) > LIMIT:
            return invalid
        if not whole and not frac:
            return invalid  # '.' alone has no digits
        if not unit:
            return f"time: missing unit in duration {_quote(text)}"
        if unit not in UNITS:
            return f"time: unknown unit {_quote(unit)} in duration {_quote(text)}"
        size = UNITS[unit]
        if int(whole or "0") * size > LIMIT:
            return invalid
        value = int(whole or "0") * size + _fraction_ns(frac or "", size)
        if value > LIMIT:
            return invalid
        total = (total + value) % 2**64
        if total > LIMIT:
            return invalid
        pos = term.end()
    if negative:
        return -total
    return total if total < LIMIT else invalid


def model_format(ns: int) -> str:
    """Go's ``Duration.String``, from its documentation: below one second the largest of
    ns, µs and ms that keeps a whole part; from one second on h, m and s, each present
    once a larger one is; fractions without trailing zeros."""
    if ns == 0:
        return "0s"
    sign, left = ("-" if ns < 0 else ""), abs(ns)

    def fraction(part: int, size: int) -> str:
        digits = str(part).rjust(len(str(size)) - 1, "0").rstrip("0")
        return f".{digits}" if digits else ""

    if left < 10**9:
        unit, size = next(
            (u, n) for u, n in (("ns", 1), ("\u00b5s", 10**3), ("ms", 10**6)) if left < n * 1000
        )
        return f"{sign}{left // size}{fraction(left % size, size)}{unit}"
    hours, left = divmod(left, 3600 * 10**9)
    minutes, left = divmod(left, 60 * 10**9)
    seconds = f"{left // 10**9}{fraction(left % 10**9, 10**9)}s"
    return sign + (f"{hours}h{minutes}m" if hours else f"{minutes}m" if minutes else "") + seconds


def actual_parse(text: str) -> int | str:
    try:
        return parse_duration(text)
    except DurationParseError as exc:
        return str(exc)


# --- strategies ------------------------------------------------------------------------------

int64 = st.integers(min_value=MIN_DURATION_NS, max_value=MAX_DURATION_NS)
digits = st.text(alphabet="0123456789", max_size=25)
number = st.one_of(
    st.builds(lambda w, f: f"{w}.{f}", digits, digits),
    digits,
    st.integers(min_value=0, max_value=2**66).map(str),
    st.builds(lambda w, z, f: f"{w}.{z}{f}", digits, st.text(alphabet="0", max_size=30), digits),
)
unit = st.sampled_from([*UNITS, "", "H", "d", " s", "sec", "µ", "m s"])
term = st.builds(lambda n, u: n + u, number, unit)
duration_like = st.builds(
    lambda sign, terms: sign + "".join(terms),
    st.sampled_from(["", "", "-", "+", "--", "+-"]),
    st.lists(term, min_size=0, max_size=4),
)
grammar_soup = st.text(alphabet='0123456789.+-nsuµμmh \t\x1cHé\udcff"\\', max_size=16)
any_text = st.one_of(st.text(), duration_like, grammar_soup)


# --- properties ------------------------------------------------------------------------------


@given(int64)
@example(MAX_DURATION_NS)
@example(MIN_DURATION_NS)
@example(0)
@example(1)
@example(-1)
def test_format_then_parse_round_trips(ns: int) -> None:
    """parse_duration(format_duration(n)) == n for every int64 n."""
    assert ns == parse_duration(format_duration(ns))


@given(
    st.timedeltas(
        min_value=timedelta(microseconds=MIN_DURATION_NS // 1000 + 1),
        max_value=timedelta(microseconds=MAX_DURATION_NS // 1000),
    )
)
def test_format_of_timedelta_is_format_of_its_nanoseconds(value: timedelta) -> None:
    """A timedelta formats as its exact nanosecond count does."""
    assert format_duration((value // timedelta(microseconds=1)) * 1000) == format_duration(value)


@given(any_text)
def test_parse_raises_only_value_error(text: str) -> None:
    """Any text parses to an int64 or raises DurationParseError (a ValueError), nothing else."""
    error: ValueError | None = None
    try:
        ns = parse_duration(text)
    except DurationParseError as exc:
        error = exc
    else:
        assert MIN_DURATION_NS <= ns <= MAX_DURATION_NS
    if error is not None:
        assert str(error).startswith("time: ")


@given(any_text)
@example("9223372036854775808ns9223372036854775808ns")
@example("1.9999999999999999999999s")
@example("0." + "0" * 40 + "1h")
@example("-.s")
@example("1\u00b5")
def test_parse_matches_the_independent_model(text: str) -> None:
    """parse_duration and the model agree on every value and every error message."""
    assert model_parse(text) == actual_parse(text)


@given(
    st.integers(min_value=1, max_value=MAX_DURATION_NS), st.sampled_from(["", " ", "\n", "\u3000"])
)
def test_positive_durations_select_builtin_at_that_cadence(ns: int, pad: str) -> None:
    """A positive Go duration, padded with white space, is the built-in cadence (to the µs)."""
    schedule = parse_interval(f"{pad}{format_duration(ns)}{pad}", timedelta(hours=6))
    assert Mode.BUILTIN is schedule.mode
    assert schedule.interval > timedelta(0)
    # The nearest microsecond, ties to even, never zero.
    expected_us = max(1, round(Fraction(ns, 1000)))
    assert timedelta(microseconds=expected_us) == schedule.interval
    assert model_format(expected_us * 1000) == format_duration(schedule.interval)


@given(int64)
@example(MAX_DURATION_NS)
@example(MAX_DURATION_NS - 1)
@example(MIN_DURATION_NS)
@example(MIN_DURATION_NS + 1)
@example(500)
@example(1_500)
@example(2_500)
@example(-500)
@example(-1_500)
@example(-2_500)
@example(0)
def test_nanoseconds_become_the_nearest_microsecond_over_all_of_int64(ns: int) -> None:
    """Exact rounding over Go's whole range: the nearest microsecond, ties to even
    (Fraction arithmetic, no float), and a positive duration never becomes zero."""
    expected = round(Fraction(ns, 1000))
    if ns > 0:
        expected = max(1, expected)
    assert timedelta(microseconds=expected) == timedelta_from_ns(ns)


@given(st.integers(min_value=1, max_value=MAX_DURATION_NS))
@example(MAX_DURATION_NS)
def test_the_cadence_of_any_positive_nanosecond_count_is_its_nearest_microsecond(ns: int) -> None:
    """parse_interval("<n>ns") is the nearest microsecond to n for every positive int64 n,
    and that cadence formats in Go's form (as the CLI prints it), which reads back as it."""
    schedule = parse_interval(f"{ns}ns", "6h")
    expected_us = max(1, round(Fraction(ns, 1000)))
    assert timedelta(microseconds=expected_us) == schedule.interval
    assert model_format(expected_us * 1000) == format_duration(schedule.interval)


def _recording_logger() -> tuple[logging.Logger, list[logging.LogRecord]]:
    logger = logging.getLogger(f"test_sched_interval.properties.{next(_names)}")
    logger.propagate = False
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger.addHandler(Keep())
    return logger, records


defaults = st.one_of(
    st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(days=100_000)),
    st.integers(min_value=1, max_value=10**9),
    st.floats(min_value=1e-9, max_value=1e9),
    st.integers(min_value=1, max_value=MAX_DURATION_NS).map(format_duration),
)
bound = st.one_of(
    st.none(),
    st.integers(min_value=-10, max_value=10**6),
    st.sampled_from(["1m", "1h", "0", "-1s", "1ns"]),
)


@given(any_text, defaults, st.booleans(), st.tuples(bound, bound), st.booleans())
def test_parse_interval_never_raises_and_builtin_is_positive(
    raw: str,
    default: timedelta | int | float | str,
    zero_as_once: bool,
    bounds: tuple[int | str | None, int | str | None],
    redact_value: bool,
) -> None:
    """With a positive default any text gives a schedule, and its cadence is positive."""
    logger, records = _recording_logger()
    schedule = parse_interval(
        raw,
        default,
        zero_as_once=zero_as_once,
        bounds=bounds,
        logger=logger,
        redact_value=redact_value,
    )
    assert schedule.mode in Mode
    assert schedule.interval > timedelta(0)
    micros = schedule.interval // timedelta(microseconds=1)
    assert model_format(micros * 1000) == format_duration(schedule.interval)
    for record in records:
        assert record.getMessage()


# Values carrying a marker no bound, default or name can show: "hunter2" in unparseable
# text, or the digits 98765 in a duration that parses (negative, or clamped by a bound).
secret = st.builds(lambda a, b: f"{a}hunter2{b}", st.text(max_size=5), st.text(max_size=5))
marked_duration = st.builds(
    lambda sign, n, u: f"{sign}{n}{u}",
    st.sampled_from(["-", "", "+"]),
    st.integers(9876500, 9876599),
    st.sampled_from(["ns", "us", "ms", "s", "m", "h"]),
)


@given(
    st.one_of(secret, marked_duration),
    st.tuples(bound, bound),
    st.text(alphabet="ABCXYZ_", min_size=1, max_size=8),
)
def test_redacted_records_never_contain_the_raw_value(
    raw: str, bounds: tuple[int | str | None, int | str | None], name: str
) -> None:
    """Under redact_value no log record carries the raw value, in its message or any field."""
    logger, records = _recording_logger()
    parse_interval(
        raw, timedelta(hours=6), bounds=bounds, name=name, logger=logger, redact_value=True
    )
    marker = "hunter2" if "hunter2" in raw else "98765"
    for record in records:
        shown = [record.getMessage(), *(repr(v) for v in vars(record).values())]
        assert not any(marker in text for text in shown), shown


@given(st.one_of(secret, marked_duration), st.tuples(bound, bound))
def test_unredacted_records_echo_the_value(
    raw: str, bounds: tuple[int | str | None, int | str | None]
) -> None:
    """Without redaction a fallback echoes the raw value and a clamp the requested duration,
    as Go does (so the redaction test is not vacuous)."""
    logger, records = _recording_logger()
    parse_interval(raw, timedelta(hours=6), bounds=bounds, logger=logger)
    for record in records:
        fields = vars(record)
        if record.getMessage().startswith("interval clamped"):
            requested = format_duration(parse_duration(raw.strip()))
            assert f"requested={requested} " in record.getMessage()
            assert requested == fields["sched_requested"]
        else:
            assert f"value={raw!r} " in record.getMessage()
            assert raw == fields["sched_value"]
