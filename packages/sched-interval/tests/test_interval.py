"""parse_interval and interval_from_env: every row of the spec's table and every option."""

from __future__ import annotations

import copy
import itertools
import json
import logging
import math
import os
import pickle
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from sched_interval import (
    LOGGER_NAME,
    DurationParseError,
    IntervalError,
    Mode,
    Schedule,
    format_duration,
    interval_from_env,
    parse_interval,
)

SIX_HOURS = timedelta(hours=6)
_names = itertools.count()

# Go's unicode.IsSpace (strings.TrimSpace); U+001C..U+001F are not in it.
GO_WHITE_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
RECORD_ATTRIBUTES = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class ListHandler(logging.Handler):
    """Keeps every record; a formatting or writing error fails the test."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def handleError(self, record: logging.LogRecord) -> None:
        raise  # noqa: PLE0704 - re-raise the error being handled


def fresh_logger() -> tuple[logging.Logger, ListHandler]:
    """A logger of its own with a recording handler."""
    logger = logging.getLogger(f"test_sched_interval.{next(_names)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    handler = ListHandler()
    logger.addHandler(handler)
    return logger, handler


def messages(handler: ListHandler) -> list[str]:
    """What the default formatter prints for each record."""
    formatter = logging.Formatter()
    return [formatter.format(record) for record in handler.records]


def check(
    raw: str | None, default: object = SIX_HOURS, **options: object
) -> tuple[Schedule, list[str]]:
    """parse_interval(raw, default, **options) with a recording logger."""
    logger, handler = fresh_logger()
    schedule = parse_interval(raw, default, logger=logger, **options)  # type: ignore[arg-type]
    return schedule, messages(handler)


# --- the spec's table ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("30m", Schedule(timedelta(minutes=30), Mode.BUILTIN)),
        ("1h30m", Schedule(timedelta(hours=1, minutes=30), Mode.BUILTIN)),
        ("1.5h", Schedule(timedelta(hours=1, minutes=30), Mode.BUILTIN)),
        (".5s", Schedule(timedelta(milliseconds=500), Mode.BUILTIN)),
        ("5.s", Schedule(timedelta(seconds=5), Mode.BUILTIN)),
        ("+5s", Schedule(timedelta(seconds=5), Mode.BUILTIN)),
        ("1µs", Schedule(timedelta(microseconds=1), Mode.BUILTIN)),
        ("1μs", Schedule(timedelta(microseconds=1), Mode.BUILTIN)),
        ("1us", Schedule(timedelta(microseconds=1), Mode.BUILTIN)),
        ("", Schedule(SIX_HOURS, Mode.BUILTIN)),
        (None, Schedule(SIX_HOURS, Mode.BUILTIN)),
        ("   ", Schedule(SIX_HOURS, Mode.BUILTIN)),
        ("off", Schedule(SIX_HOURS, Mode.EXTERNAL)),
        ("disabled", Schedule(SIX_HOURS, Mode.EXTERNAL)),
        ("0", Schedule(SIX_HOURS, Mode.EXTERNAL)),
        ("0s", Schedule(SIX_HOURS, Mode.EXTERNAL)),
        ("-0", Schedule(SIX_HOURS, Mode.EXTERNAL)),
        ("0h0m", Schedule(SIX_HOURS, Mode.EXTERNAL)),
        (" 30m\n", Schedule(timedelta(minutes=30), Mode.BUILTIN)),
        ("9223372036854775807ns", Schedule(timedelta(microseconds=9223372036854776), Mode.BUILTIN)),
    ],
)
def test_table_rows_without_warning(raw: str | None, expected: Schedule) -> None:
    """Positive durations, the empty value, the sentinels and zero select their mode silently."""
    assert (expected, []) == check(raw)


NEGATIVE = "interval is negative, using default"
UNPARSEABLE = "cannot parse interval, using default"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("-1h", NEGATIVE),
        ("-1.5h", NEGATIVE),
        ("-9223372036854775808ns", NEGATIVE),
        ("banana", UNPARSEABLE),
        ("1", UNPARSEABLE),
        ("1H", UNPARSEABLE),
        ("1 h", UNPARSEABLE),
        ("1d", UNPARSEABLE),
        (".", UNPARSEABLE),
        ("9223372036854775808ns", UNPARSEABLE),
        ("2562048h", UNPARSEABLE),
        ("\x1c30m", UNPARSEABLE),
        (" banana\n", UNPARSEABLE),
    ],
)
def test_table_rows_that_fall_back_with_a_warning(raw: str, message: str) -> None:
    """Negative and unparseable values run built-in at the default, with Go's warning."""
    expected = f"{message}: name=interval value={raw!r} default=6h0m0s"
    assert (Schedule(SIX_HOURS, Mode.BUILTIN), [expected]) == check(raw)


def test_go_example() -> None:
    """The Go documentation's example prints the same three lines."""
    built = parse_interval("30m", timedelta(hours=1))
    lines = [
        f"{built.mode} every {format_duration(built.interval)}",
        str(parse_interval("off", timedelta(hours=1)).mode),
        str(parse_interval("0", timedelta(hours=1), zero_as_once=True).mode),
    ]
    assert ["built-in every 30m0s", "external", "once"] == lines


# --- trimming and sentinels ------------------------------------------------------------------


@pytest.mark.parametrize("space", list(GO_WHITE_SPACE))
def test_trims_every_go_white_space_character(space: str) -> None:
    """Each character Go's strings.TrimSpace removes is removed on both sides."""
    assert (Schedule(timedelta(minutes=30), Mode.BUILTIN), []) == check(f"{space}30m{space}")


@pytest.mark.parametrize(
    "separator", ["\x1c", "\x1d", "\x1e", "\x1f", "\u180e", "\u200b", "\ufeff"]
)
def test_does_not_trim_what_go_keeps(separator: str) -> None:
    """str.strip() would remove U+001C..U+001F; Go does not, so the value is unparseable."""
    schedule, warnings = check(f"{separator}30m")
    assert Schedule(SIX_HOURS, Mode.BUILTIN) == schedule
    assert 1 == len(warnings)
    assert "cannot parse interval" in warnings[0]


@pytest.mark.parametrize(
    "raw", ["OFF", "Off", "oFf", "DISABLED", "Disabled", "dIsAbLeD", " off ", "\tdisabled\n"]
)
def test_sentinels_fold_ascii_case(raw: str) -> None:
    """off and disabled match in any ASCII case, after trimming."""
    assert (Schedule(SIX_HOURS, Mode.EXTERNAL), []) == check(raw)


@pytest.mark.parametrize(
    "raw",
    [
        "dİsabled",  # U+0130 LATIN CAPITAL LETTER I WITH DOT ABOVE
        "diſabled",  # noqa: RUF001 - U+017F LATIN SMALL LETTER LONG S: str.casefold() would match it
        "DIſABLED",  # noqa: RUF001
        "oﬀ",  # U+FB00 LATIN SMALL LIGATURE FF
        "ＯＦＦ",  # noqa: RUF001 - fullwidth
        "offf",
        "disable",
        "o ff",
        "\x1coff",
    ],
)
def test_non_ascii_look_alikes_are_not_sentinels(raw: str) -> None:
    """Only ASCII letters fold: a look-alike falls back to the default with a warning."""
    schedule, warnings = check(raw, name="JOB_INTERVAL")
    assert Schedule(SIX_HOURS, Mode.BUILTIN) == schedule
    assert [
        f"cannot parse interval, using default: name=JOB_INTERVAL value={raw!r} default=6h0m0s"
    ] == warnings


# --- zero_as_once ------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["0", "0s", "-0", "+0", "0h0m", "0.0s", " 0 "])
@pytest.mark.parametrize(("zero_as_once", "mode"), [(False, Mode.EXTERNAL), (True, Mode.ONCE)])
def test_zero_selects_external_or_once(raw: str, zero_as_once: bool, mode: Mode) -> None:
    """A zero duration is external, or once with zero_as_once; the default rides along."""
    assert (Schedule(SIX_HOURS, mode), []) == check(raw, zero_as_once=zero_as_once)


@pytest.mark.parametrize("raw", ["off", "", "30m", "-1h", "banana"])
def test_zero_as_once_changes_only_zero(raw: str) -> None:
    """zero_as_once leaves every non-zero value exactly as without it."""
    assert check(raw) == check(raw, zero_as_once=True)


# --- bounds ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "bounds", "interval", "warnings"),
    [
        ("30m", (timedelta(minutes=1), timedelta(hours=1)), timedelta(minutes=30), []),
        ("1m", (timedelta(minutes=1), timedelta(hours=1)), timedelta(minutes=1), []),
        ("1h", (timedelta(minutes=1), timedelta(hours=1)), timedelta(hours=1), []),
        (
            "10s",
            (timedelta(minutes=1), timedelta(hours=1)),
            timedelta(minutes=1),
            ["interval clamped: name=interval requested=10s clamped_to=1m0s"],
        ),
        (
            "2h",
            (timedelta(minutes=1), timedelta(hours=1)),
            timedelta(hours=1),
            ["interval clamped: name=interval requested=2h0m0s clamped_to=1h0m0s"],
        ),
        # A non-positive bound is ignored: a floor alone, a ceiling alone.
        (
            "10s",
            (timedelta(minutes=1), 0),
            timedelta(minutes=1),
            ["interval clamped: name=interval requested=10s clamped_to=1m0s"],
        ),
        ("1000h", (timedelta(minutes=1), 0), timedelta(hours=1000), []),
        ("1ns", (0, timedelta(hours=1)), timedelta(microseconds=1), []),
        ("1ns", (-5, timedelta(hours=-1)), timedelta(microseconds=1), []),
        (
            "1000h",
            (None, timedelta(hours=1)),
            timedelta(hours=1),
            ["interval clamped: name=interval requested=1000h0m0s clamped_to=1h0m0s"],
        ),
        # A swapped pair is put in order.
        (
            "10s",
            (timedelta(hours=1), timedelta(minutes=1)),
            timedelta(minutes=1),
            ["interval clamped: name=interval requested=10s clamped_to=1m0s"],
        ),
        (
            "2h",
            (timedelta(hours=1), timedelta(minutes=1)),
            timedelta(hours=1),
            ["interval clamped: name=interval requested=2h0m0s clamped_to=1h0m0s"],
        ),
        # Bounds as seconds and as Go duration strings.
        (
            "10s",
            (60, 3600.0),
            timedelta(minutes=1),
            ["interval clamped: name=interval requested=10s clamped_to=1m0s"],
        ),
        (
            "2h",
            ("1m", "1h"),
            timedelta(hours=1),
            ["interval clamped: name=interval requested=2h0m0s clamped_to=1h0m0s"],
        ),
        # A sub-microsecond value under a microsecond floor is clamped, not rounded past it.
        (
            "999ns",
            ("1us", None),
            timedelta(microseconds=1),
            ["interval clamped: name=interval requested=999ns clamped_to=1µs"],
        ),
    ],
)
def test_bounds_clamp_a_parsed_positive_cadence(
    raw: str, bounds: tuple[object, object], interval: timedelta, warnings: list[str]
) -> None:
    """Bounds clamp a parsed positive cadence and warn when they change it."""
    assert (Schedule(interval, Mode.BUILTIN), warnings) == check(raw, bounds=bounds)


@pytest.mark.parametrize(
    ("raw", "mode", "warned"),
    [
        ("", Mode.BUILTIN, False),
        ("off", Mode.EXTERNAL, False),
        ("0", Mode.EXTERNAL, False),
        ("-1h", Mode.BUILTIN, True),
        ("banana", Mode.BUILTIN, True),
    ],
)
def test_bounds_never_apply_to_the_default(raw: str, mode: Mode, warned: bool) -> None:
    """The default is carried unclamped in every fallback, external and once result."""
    schedule, warnings = check(
        raw, timedelta(seconds=10), bounds=(timedelta(minutes=1), timedelta(hours=1))
    )
    assert Schedule(timedelta(seconds=10), mode) == schedule
    assert warned == bool(warnings)
    assert not any("clamped" in w for w in warnings)


def test_bounds_never_apply_to_once() -> None:
    """zero_as_once's result carries the default, whatever the bounds."""
    schedule, _ = check("0", timedelta(days=3), zero_as_once=True, bounds=(60, 3600))
    assert Schedule(timedelta(days=3), Mode.ONCE) == schedule


# --- default ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("default", "expected"),
    [
        (SIX_HOURS, SIX_HOURS),
        (21600, SIX_HOURS),
        (21600.0, SIX_HOURS),
        ("6h", SIX_HOURS),
        ("1.5s", timedelta(seconds=1.5)),
        (1e-9, timedelta(microseconds=1)),
        ("1ns", timedelta(microseconds=1)),
    ],
)
def test_default_accepts_timedelta_seconds_or_go_string(
    default: object, expected: timedelta
) -> None:
    """default is a timedelta, seconds, or a Go duration string; a positive one stays positive."""
    assert (Schedule(expected, Mode.BUILTIN), []) == check("", default)


@pytest.mark.parametrize(
    "default", [timedelta(0), timedelta(microseconds=-1), 0, -1, 0.0, -0.5, "0", "0s", "-1h"]
)
@pytest.mark.parametrize("raw", ["", "30m", "off"])
def test_non_positive_default_is_a_programming_error(default: object, raw: str) -> None:
    """A non-positive default raises ValueError at once, whatever the raw value."""
    with pytest.raises(IntervalError, match="default must be a positive duration"):
        parse_interval(raw, default)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("default", "error"),
    [
        ("6 hours", DurationParseError),
        (True, ValueError),
        (math.nan, ValueError),
        (math.inf, ValueError),
        (timedelta(days=106_752), IntervalError),
        (10**12, IntervalError),
    ],
)
def test_invalid_default_raises_value_error(default: object, error: type[Exception]) -> None:
    """A default that is no duration, or beyond Go's range, raises a ValueError naming it."""
    with pytest.raises(error, match="default") as info:
        parse_interval("30m", default)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("default", [None, [1], object()])
def test_default_of_the_wrong_type_raises_type_error(default: object) -> None:
    """A default that is not a duration type raises TypeError."""
    with pytest.raises(TypeError, match="default"):
        parse_interval("30m", default)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bounds", [("1 m", None), (None, True), (math.nan, None), (None, timedelta(days=200_000))]
)
def test_invalid_bound_raises_value_error(bounds: tuple[object, object]) -> None:
    """A bound that is no duration raises a ValueError naming the bound."""
    with pytest.raises(ValueError, match="bound"):
        parse_interval("30m", SIX_HOURS, bounds=bounds)  # type: ignore[arg-type]


def test_raw_of_the_wrong_type_raises_type_error() -> None:
    """raw is a str (or None for unset); bytes are a programming error."""
    with pytest.raises(TypeError, match="raw value"):
        parse_interval(b"30m", SIX_HOURS)  # type: ignore[arg-type]


# --- sub-microsecond values ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "interval"),
    [
        ("1ns", timedelta(microseconds=1)),
        ("499ns", timedelta(microseconds=1)),
        ("0.5us", timedelta(microseconds=1)),
        ("1500ns", timedelta(microseconds=2)),
        ("2500ns", timedelta(microseconds=2)),
        ("1.0000001s", timedelta(seconds=1)),
    ],
)
def test_positive_cadence_never_becomes_zero(raw: str, interval: timedelta) -> None:
    """A sub-µs positive value becomes 1 µs; others round to the nearest µs, ties to even."""
    assert (Schedule(interval, Mode.BUILTIN), []) == check(raw)


# --- warnings: wording, structured fields, redaction ----------------------------------------


def test_unparseable_warning_begins_with_gos_text_and_carries_gos_attributes() -> None:
    """Go's message, then its attributes as facts; the same in sched_-prefixed fields."""
    logger, handler = fresh_logger()
    parse_interval("banana", SIX_HOURS, name="JOB_INTERVAL", logger=logger)
    [record] = handler.records
    assert logging.WARNING == record.levelno
    assert (
        "cannot parse interval, using default: name=JOB_INTERVAL value='banana' default=6h0m0s"
        == record.getMessage()
    )
    fields = {k: v for k, v in vars(record).items() if k.startswith("sched_")}
    assert {
        "sched_name": "JOB_INTERVAL",
        "sched_value": "banana",
        "sched_default": "6h0m0s",
    } == fields


def test_negative_and_clamp_warnings_carry_gos_attributes() -> None:
    """interval is negative: name, value, default; interval clamped: name, requested, clamped_to."""
    logger, handler = fresh_logger()
    parse_interval("-1h", SIX_HOURS, name="X", logger=logger)
    parse_interval("5s", SIX_HOURS, name="X", logger=logger, bounds=("1m", "1h"))
    parse_interval("5h", SIX_HOURS, name="X", logger=logger, bounds=("1m", "1h"))
    parse_interval("90m", "6h", name="X", logger=logger, bounds=("1m", "1h"))
    assert [
        "interval is negative, using default: name=X value='-1h' default=6h0m0s",
        "interval clamped: name=X requested=5s clamped_to=1m0s",
        "interval clamped: name=X requested=5h0m0s clamped_to=1h0m0s",
        "interval clamped: name=X requested=1h30m0s clamped_to=1h0m0s",
    ] == messages(handler)
    fields = [{k: v for k, v in vars(r).items() if k.startswith("sched_")} for r in handler.records]
    assert [
        {"sched_name": "X", "sched_value": "-1h", "sched_default": "6h0m0s"},
        {"sched_name": "X", "sched_requested": "5s", "sched_clamped_to": "1m0s"},
        {"sched_name": "X", "sched_requested": "5h0m0s", "sched_clamped_to": "1h0m0s"},
        {"sched_name": "X", "sched_requested": "1h30m0s", "sched_clamped_to": "1h0m0s"},
    ] == fields


def test_structured_fields_never_collide_with_record_attributes() -> None:
    """Every extra key is sched_-prefixed and unknown to LogRecord (else logging would raise)."""
    logger, handler = fresh_logger()
    parse_interval("banana", SIX_HOURS, logger=logger)
    parse_interval("-1h", SIX_HOURS, logger=logger)
    parse_interval("1s", SIX_HOURS, logger=logger, bounds=(60, None))
    extra_keys = {k for r in handler.records for k in vars(r) if k not in RECORD_ATTRIBUTES}
    assert extra_keys
    assert all(k.startswith("sched_") for k in extra_keys)


@pytest.mark.parametrize(
    ("raw", "options", "message"),
    [
        ("hunter2", {}, "cannot parse interval, using default: name=JOB_INTERVAL default=6h0m0s"),
        ("-1h", {}, "interval is negative, using default: name=JOB_INTERVAL default=6h0m0s"),
        (
            "5s",
            {"bounds": ("1m", None)},
            "interval clamped: name=JOB_INTERVAL clamped_to=1m0s",
        ),
        (
            "5h",
            {"bounds": (None, "1h")},
            "interval clamped: name=JOB_INTERVAL clamped_to=1h0m0s",
        ),
    ],
)
def test_redact_value_keeps_the_value_out_of_every_warning(
    raw: str, options: dict[str, object], message: str
) -> None:
    """With redact_value the warnings name the variable only; the clamp keeps the bound applied."""
    logger, handler = fresh_logger()
    parse_interval(raw, SIX_HOURS, name="JOB_INTERVAL", logger=logger, redact_value=True, **options)  # type: ignore[arg-type]
    [record] = handler.records
    assert message == logging.Formatter().format(record)
    assert "sched_value" not in vars(record)
    assert "sched_requested" not in vars(record)
    assert all(raw not in repr(v) for v in vars(record).values())


def test_redacted_warnings_carry_gos_attributes_less_the_value() -> None:
    """Redacted, Go logs name and default (or clamped_to): the same fields here."""
    logger, handler = fresh_logger()
    for raw in ["hunter2", "-1h", "5s"]:
        parse_interval(
            raw, SIX_HOURS, name="X", logger=logger, redact_value=True, bounds=("1m", None)
        )
    fields = [{k: v for k, v in vars(r).items() if k.startswith("sched_")} for r in handler.records]
    assert [
        {"sched_name": "X", "sched_default": "6h0m0s"},
        {"sched_name": "X", "sched_default": "6h0m0s"},
        {"sched_name": "X", "sched_clamped_to": "1m0s"},
    ] == fields


@pytest.mark.parametrize("redact_value", [False, True])
def test_redact_value_does_not_change_the_schedule(redact_value: bool) -> None:
    """Redaction changes what is logged, never what is returned."""
    for raw in ["banana", "-1h", "5s", "30m", "off", "0"]:
        assert (
            check(raw, bounds=(60, None))[0]
            == check(raw, bounds=(60, None), redact_value=redact_value)[0]
        )


@pytest.mark.parametrize("raw", ["\udcff30m", "30m\udc80", "\ud800", "caf\udce9"])
def test_lone_surrogates_fall_back_and_log_safely(raw: str, tmp_path: Path) -> None:
    """Undecodable bytes from os.environ fall back with a warning any handler can write as UTF-8."""
    logger, recorder = fresh_logger()
    path = tmp_path / "log.jsonl"
    with path.open("w", encoding="utf-8", errors="strict") as stream:
        handler = logging.StreamHandler(stream)

        class JsonFormatter(logging.Formatter):
            def format(self, record: logging.LogRecord) -> str:
                fields = {k: v for k, v in vars(record).items() if k.startswith("sched_")}
                return json.dumps({"message": record.getMessage(), **fields}, ensure_ascii=False)

        handler.setFormatter(JsonFormatter())
        handler.handleError = ListHandler.handleError.__get__(handler)  # type: ignore[method-assign]
        logger.addHandler(handler)
        try:
            schedule = parse_interval(raw, SIX_HOURS, name="JOB_INTERVAL", logger=logger)
        finally:
            logger.removeHandler(handler)
    assert Schedule(SIX_HOURS, Mode.BUILTIN) == schedule
    [line] = path.read_text(encoding="utf-8").splitlines()
    written = json.loads(line)
    assert (
        f"cannot parse interval, using default: name=JOB_INTERVAL value={raw!r} default=6h0m0s"
        == written["message"]
    )
    assert raw.encode("utf-8", "backslashreplace").decode() == written["sched_value"]
    assert 1 == len(recorder.records)


def test_default_logger_is_the_package_logger() -> None:
    """Without a logger, warnings go to logging.getLogger("sched_interval")."""
    handler = ListHandler()
    package_logger = logging.getLogger(LOGGER_NAME)
    package_logger.addHandler(handler)
    try:
        parse_interval("banana", SIX_HOURS)
    finally:
        package_logger.removeHandler(handler)
    assert ["sched_interval"] == [r.name for r in handler.records]


def test_no_warning_is_logged_for_valid_values() -> None:
    """Valid values, the empty value and the sentinels log nothing at any level."""
    logger, handler = fresh_logger()
    for raw in ["", "30m", "off", "DISABLED", "0", " 1h "]:
        parse_interval(raw, SIX_HOURS, logger=logger, bounds=(60, 7200))
    assert [] == handler.records


def test_warning_points_at_the_caller() -> None:
    """The record's location is the code that called parse_interval or interval_from_env."""
    logger, handler = fresh_logger()
    parse_interval("banana", SIX_HOURS, logger=logger)
    interval_from_env(
        "SCHED_TEST_UNUSED", SIX_HOURS, logger=logger, environ={"SCHED_TEST_UNUSED": "x"}
    )
    assert [(__file__, "test_warning_points_at_the_caller")] * 2 == [
        (r.pathname, r.funcName) for r in handler.records
    ]


# --- interval_from_env -----------------------------------------------------------------------


def test_interval_from_env_reads_and_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The variable's value is parsed and warnings are named after it."""
    monkeypatch.setenv("SCHED_TEST_INTERVAL", "banana")
    logger, handler = fresh_logger()
    schedule = interval_from_env("SCHED_TEST_INTERVAL", "6h", logger=logger)
    assert Schedule(SIX_HOURS, Mode.BUILTIN) == schedule
    assert [
        "cannot parse interval, using default: name=SCHED_TEST_INTERVAL value='banana'"
        " default=6h0m0s"
    ] == messages(handler)
    assert "SCHED_TEST_INTERVAL" == vars(handler.records[0])["sched_name"]


def test_interval_from_env_unset_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unset variable selects built-in at the default, silently."""
    monkeypatch.delenv("SCHED_TEST_INTERVAL", raising=False)
    logger, handler = fresh_logger()
    assert Schedule(SIX_HOURS, Mode.BUILTIN) == interval_from_env(
        "SCHED_TEST_INTERVAL", SIX_HOURS, logger=logger
    )
    assert [] == handler.records


def test_interval_from_env_passes_every_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """zero_as_once, bounds and redact_value reach the rules."""
    logger, handler = fresh_logger()
    monkeypatch.setenv("SCHED_TEST_INTERVAL", "0")
    assert Mode.ONCE == interval_from_env("SCHED_TEST_INTERVAL", SIX_HOURS, zero_as_once=True).mode
    monkeypatch.setenv("SCHED_TEST_INTERVAL", "1s")
    schedule = interval_from_env(
        "SCHED_TEST_INTERVAL", SIX_HOURS, bounds=(60, None), logger=logger, redact_value=True
    )
    assert Schedule(timedelta(minutes=1), Mode.BUILTIN) == schedule
    assert ["interval clamped: name=SCHED_TEST_INTERVAL clamped_to=1m0s"] == messages(handler)


def test_interval_from_env_undecodable_bytes_in_a_real_process() -> None:
    """A variable holding invalid UTF-8 bytes reaches Python as surrogates and falls back safely."""
    code = (
        "import logging, sys\n"
        "logging.basicConfig(stream=sys.stdout, format='%(message)s|%(sched_value)s')\n"
        "from sched_interval import interval_from_env\n"
        "s = interval_from_env('JOB_INTERVAL', '6h')\n"
        "print(s.mode, s.interval)\n"
    )
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    env_bytes = {k.encode(): v.encode() for k, v in env.items()}
    env_bytes[b"JOB_INTERVAL"] = b"\xff30m"
    result = subprocess.run(
        [sys.executable, "-u", "-c", code],
        env=env_bytes,
        capture_output=True,
        check=True,
        timeout=60,
    )
    assert [
        b"cannot parse interval, using default: name=JOB_INTERVAL value='\\udcff30m'"
        b" default=6h0m0s|\\udcff30m",
        b"built-in 6:00:00",
    ] == result.stdout.splitlines()
    assert b"" == result.stderr


# --- Mode and Schedule ----------------------------------------------------------------------


def test_mode_prints_as_go_names() -> None:
    """Mode members are strings that print as the Go library's mode names."""
    assert ["built-in", "external", "once"] == [str(m) for m in Mode]
    assert ["built-in", "external", "once"] == [f"{m}" for m in Mode]
    assert Mode.EXTERNAL is Mode("external")
    assert isinstance(Mode.ONCE, str)
    plain: str = "once"
    assert plain == Mode.ONCE


def test_schedule_is_frozen() -> None:
    """A Schedule cannot be changed after it is made."""
    schedule = Schedule(SIX_HOURS, Mode.BUILTIN)
    with pytest.raises(AttributeError):
        schedule.interval = timedelta(1)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        schedule.mode = Mode.ONCE  # type: ignore[misc]
    with pytest.raises(AttributeError):
        schedule.extra = 1
    with pytest.raises(AttributeError):
        del schedule.mode
    assert Schedule(SIX_HOURS, Mode.BUILTIN) == schedule


def test_schedule_is_hashable_value() -> None:
    """Equal schedules hash alike; different fields compare unequal."""
    a = Schedule(SIX_HOURS, Mode.BUILTIN)
    b = Schedule(timedelta(seconds=21600), "built-in")
    assert a == b
    assert hash(a) == hash(b)
    assert 1 == len({a, b})
    assert a != Schedule(SIX_HOURS, Mode.EXTERNAL)
    assert a != Schedule(timedelta(hours=5), Mode.BUILTIN)
    assert a != (SIX_HOURS, Mode.BUILTIN)


def test_schedule_repr_pickle_copy_and_match() -> None:
    """Schedule reprs, pickles, copies, replaces and pattern-matches like a frozen dataclass."""
    schedule = Schedule(SIX_HOURS, Mode.ONCE)
    assert "Schedule(interval=datetime.timedelta(seconds=21600), mode=<Mode.ONCE: 'once'>)" == repr(
        schedule
    )
    assert schedule == pickle.loads(pickle.dumps(schedule))
    assert schedule == copy.deepcopy(schedule)
    assert Schedule(SIX_HOURS, Mode.BUILTIN) == schedule.__replace__(mode=Mode.BUILTIN)
    assert Schedule(timedelta(1), Mode.ONCE) == schedule.__replace__(interval=timedelta(1))
    if sys.version_info >= (3, 13):
        assert Schedule(SIX_HOURS, Mode.EXTERNAL) == copy.replace(schedule, mode=Mode.EXTERNAL)  # type: ignore[attr-defined,unused-ignore]
    match schedule:
        case Schedule(interval, Mode.ONCE):
            matched: timedelta | None = interval
        case _:
            matched = None
    assert SIX_HOURS == matched


def test_schedule_validates_its_fields() -> None:
    """interval must be a timedelta and mode a Mode (or its value)."""
    with pytest.raises(TypeError):
        Schedule(60, Mode.BUILTIN)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="builtin"):
        Schedule(SIX_HOURS, "builtin")
