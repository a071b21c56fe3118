"""jittered_delay: Go's JitteredDelay band, drawn in integer nanoseconds."""

from __future__ import annotations

import math
import random
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sched_loop_testkit import band_ns, fractions, intervals, to_ns

from sched_loop import LoopConfigError, jittered_delay


class ChosenDraws(random.Random):
    """A random source whose draws Hypothesis chooses: either end of the range as often
    as any value between, so a band property meets its edges, and a failure shrinks and
    replays (a true random source does neither)."""

    def __init__(self, data: st.DataObject) -> None:
        super().__init__(0)
        self._data = data

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:
        low, high = (0, start) if stop is None else (start, stop)
        assert 1 == step
        return self._data.draw(
            st.one_of(st.just(low), st.just(high - 1), st.integers(low, high - 1)), "draw"
        )


@given(interval=intervals, fraction=fractions, data=st.data())
def test_draw_lies_in_the_go_band(
    interval: timedelta, fraction: float, data: st.DataObject
) -> None:
    """Every draw lies in [interval − span, interval + span), span = trunc(interval·f),
    up to the truncation to whole microseconds, and is never negative.
    """
    delay = jittered_delay(interval, fraction, rng=ChosenDraws(data))
    lo, hi = band_ns(interval, fraction)
    if lo == hi:
        assert interval == delay
    else:
        assert lo // 1000 * 1000 <= to_ns(delay) < hi
    assert delay >= timedelta(0)


@given(interval=intervals, fraction=fractions, seed=st.integers(0, 2**64))
def test_draw_matches_the_go_reference(interval: timedelta, fraction: float, seed: int) -> None:
    """The draw is Go's `interval - span + rand.Int64N(2*span)` on the same random stream,
    truncated to microseconds (and a positive draw never becomes zero).
    """
    lo, hi = band_ns(interval, fraction)
    expected_ns = to_ns(interval) if lo == hi else lo + random.Random(seed).randrange(hi - lo)
    expected_us = max(expected_ns // 1000, 1 if expected_ns > 0 else 0)
    assert timedelta(microseconds=expected_us) == jittered_delay(
        interval, fraction, rng=random.Random(seed)
    )


@given(
    interval=intervals,
    fraction=st.floats(max_value=0.0, allow_nan=False, allow_infinity=False),
)
def test_non_positive_fraction_returns_the_interval(interval: timedelta, fraction: float) -> None:
    """A fraction ≤ 0 returns the interval unchanged: no jitter."""
    assert interval == jittered_delay(interval, fraction)


@pytest.mark.parametrize("interval", [timedelta(0), timedelta(seconds=-5), 0, -1.5])
def test_non_positive_interval_returns_the_interval(interval: timedelta | float) -> None:
    """An interval ≤ 0 is returned unchanged (as a timedelta), whatever the fraction."""
    expected = interval if isinstance(interval, timedelta) else timedelta(seconds=interval)
    assert expected == jittered_delay(interval, 0.5)


def test_fraction_above_one_is_one() -> None:
    """A fraction above 1 draws exactly what a fraction of 1 draws: [0, 2·interval)."""
    expected = [jittered_delay(10, 1.0, rng=random.Random(seed)) for seed in range(20)]
    actual = [jittered_delay(10, 5.0, rng=random.Random(seed)) for seed in range(20)]
    assert expected == actual
    assert all(timedelta(0) <= d < timedelta(seconds=20) for d in actual)


def test_accepts_seconds_and_timedelta_alike() -> None:
    """Seconds and the equal timedelta give the same draw for the same random stream."""
    assert jittered_delay(1.5, 0.2, rng=random.Random(3)) == jittered_delay(
        timedelta(seconds=1.5), 0.2, rng=random.Random(3)
    )


def test_draws_are_spread_uniformly_over_the_band() -> None:
    """Ten equal slices of the band each get about a tenth of 20 000 draws."""
    rng = random.Random(20_260_101)
    counts = [0] * 10
    for _ in range(20_000):
        ns = to_ns(jittered_delay(timedelta(seconds=100), 0.25, rng=rng))
        counts[(ns - 75 * 10**9) * 10 // (50 * 10**9)] += 1
    assert all(1_700 < c < 2_300 for c in counts), counts


def test_default_source_is_the_random_module() -> None:
    """Without rng, draws come from the random module's shared generator (seedable)."""
    random.seed(11)
    first = [jittered_delay(60, 0.5) for _ in range(5)]
    random.seed(11)
    assert first == [jittered_delay(60, 0.5) for _ in range(5)]


def test_tiny_span_returns_the_interval() -> None:
    """A span that truncates to zero nanoseconds leaves the interval unchanged."""
    assert timedelta(microseconds=1) == jittered_delay(timedelta(microseconds=1), 1e-4)


def test_positive_draw_below_a_microsecond_becomes_one_microsecond() -> None:
    """A draw in (0, 1 µs) is returned as 1 µs, never as zero."""
    draws = {
        jittered_delay(timedelta(microseconds=1), 0.9, rng=random.Random(s)) for s in range(50)
    }
    assert timedelta(0) not in draws
    assert timedelta(microseconds=1) in draws


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_or_infinite_fraction_is_rejected(bad: float) -> None:
    """NaN and infinite fractions raise LoopConfigError, a ValueError naming the argument."""
    with pytest.raises(LoopConfigError, match="fraction"):
        jittered_delay(10, bad)
    with pytest.raises(ValueError, match="fraction"):
        jittered_delay(10, bad)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_or_infinite_interval_is_rejected(bad: float) -> None:
    """NaN and infinite intervals raise LoopConfigError naming the interval."""
    with pytest.raises(LoopConfigError, match="interval"):
        jittered_delay(bad, 0.1)


def test_wrong_types_are_type_errors() -> None:
    """A non-number fraction or interval is a TypeError; a bool fraction a ValueError."""
    with pytest.raises(TypeError, match="fraction"):
        jittered_delay(10, "0.1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="interval"):
        jittered_delay("10s", 0.1)  # type: ignore[arg-type]
    with pytest.raises(LoopConfigError, match="bool"):
        jittered_delay(10, True)


def test_a_band_past_timedelta_max_is_clamped() -> None:
    """An interval near timedelta.max with full jitter never overflows: at most timedelta.max."""
    huge = timedelta.max - timedelta(days=1)
    draws = [jittered_delay(huge, 1.0, rng=random.Random(seed)) for seed in range(20)]
    assert all(timedelta(0) <= d <= timedelta.max for d in draws)
    assert timedelta.max in draws
