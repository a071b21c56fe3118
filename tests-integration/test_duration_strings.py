"""Every duration a package prints is Go's ``Duration.String``, the same one.

sched-interval owns the Go duration form (`format_duration`). Three other
packages print durations in logs and command-line output without depending on
it — sched-cmd (``SIGKILL in 5s``), sched-trigger's CLI (``done: ok in 1.5s``)
and ``python -m sched_exclusive status`` (``for 1h0m5s``) — each through a small
private formatter. These properties pin each of them to the canonical one, so
an operator reads one duration language everywhere, as in a Go deployment.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from sched_interval import format_duration

#: Whole microseconds a timedelta can carry, both signs (up to ~100 days, ample for a grace).
MICROSECONDS = st.integers(min_value=-(10**13), max_value=10**13)


def private(module: str, name: str) -> Callable[..., str]:
    """A package's private formatter (this test pins it to the public one)."""
    formatter: Callable[..., str] = getattr(importlib.import_module(module), name)
    return formatter


@given(MICROSECONDS)
def test_sched_cmd_logs_go_durations(micros: int) -> None:
    """sched-cmd's grace in its log lines reads as ``format_duration`` writes it."""
    go_duration = private("sched_cmd._core", "go_duration")
    value = timedelta(microseconds=micros)
    assert format_duration(value) == go_duration(value)


@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_sched_trigger_cli_prints_go_durations(ms: int) -> None:
    """``sched-trigger``'s ``done: ok in …`` reads as ``format_duration`` writes it."""
    format_ms = private("sched_trigger.__main__", "format_ms")
    assert format_duration(ms * 1_000_000) == format_ms(ms)


@given(st.integers(min_value=0, max_value=10**9))
def test_sched_exclusive_status_prints_go_durations(seconds: int) -> None:
    """``python -m sched_exclusive status``'s ``for …`` reads as ``format_duration`` writes it."""
    format_seconds = private("sched_exclusive._status", "format_seconds")
    assert format_duration(seconds * 1_000_000_000) == format_seconds(seconds)
