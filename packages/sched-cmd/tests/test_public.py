"""The public surface: exports, the CommandRunner seam, DEFAULT_GRACE, log formatting."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sched_cmd import DEFAULT_GRACE, command_runner
from sched_cmd._core import go_duration


def test_default_grace_is_five_seconds() -> None:
    """DEFAULT_GRACE is the Go library's DefaultGrace."""
    assert timedelta(seconds=5) == DEFAULT_GRACE


def test_command_runner_binds_the_grace() -> None:
    """command_runner(grace) runs commands like run, with that grace."""
    runner = command_runner(timedelta(milliseconds=1500))
    assert timedelta(milliseconds=1500) == runner.grace  # type: ignore[attr-defined]
    assert "command_runner(grace='1.5s')" == repr(runner)
    result = runner(["sh", "-c", "echo ok"], capture_output=True, text=True)
    assert (0, "ok\n") == (result.returncode, result.stdout)
    assert DEFAULT_GRACE == command_runner().grace  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="grace"):
        command_runner(float("nan"))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (timedelta(0), "0s"),
        (timedelta(microseconds=1), "1µs"),
        (timedelta(microseconds=1500), "1.5ms"),
        (timedelta(milliseconds=100), "100ms"),
        (timedelta(seconds=5), "5s"),
        (timedelta(seconds=1, milliseconds=500), "1.5s"),
        (timedelta(minutes=1, seconds=30), "1m30s"),
        (timedelta(hours=6), "6h0m0s"),
        (timedelta(hours=1, microseconds=1), "1h0m0.000001s"),
        (-timedelta(seconds=2), "-2s"),
    ],
)
def test_go_duration_matches_go_duration_string(value: timedelta, expected: str) -> None:
    """Durations in log messages read as Go's Duration.String prints them."""
    assert expected == go_duration(value)


_GO = re.compile(
    r"(?P<sign>-?)(?:(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?P<s>\d+(?:\.\d+)?)s"
    r"|(?P<ms>\d+(?:\.\d+)?)ms|(?P<us>\d+)µs)"
)


def _parse_go(text: str) -> int:
    """Microseconds of a Go duration string (the subset go_duration prints)."""
    match = _GO.fullmatch(text)
    assert match is not None, text
    micros = 0
    if match["us"]:
        micros = int(match["us"])
    elif match["ms"]:
        micros = round(float(match["ms"]) * 1000)
    else:
        whole, _, fraction = match["s"].partition(".")
        micros = (int(match["h"] or 0) * 3600 + int(match["m"] or 0) * 60 + int(whole)) * 10**6
        micros += int(fraction.ljust(6, "0")) if fraction else 0
    return -micros if match["sign"] else micros


@given(st.timedeltas(min_value=-timedelta(days=10_000), max_value=timedelta(days=10_000)))
def test_go_duration_round_trips(value: timedelta) -> None:
    """go_duration's text always reads back as the same number of microseconds."""
    assert value // timedelta(microseconds=1) == _parse_go(go_duration(value))
