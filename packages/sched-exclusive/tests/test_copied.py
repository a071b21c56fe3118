"""This package's copies of the shared private modules keep their contract.

tools/copies.py writes each copy from its one source; the contract's tests live
in testing/sched_testing.py and run here, on the copy this package ships.
"""

from __future__ import annotations

from types import ModuleType

import pytest
from sched_testing import (
    test_durations_refuse_what_is_not_one_naming_the_argument,
    test_durations_take_a_timedelta_or_seconds,
    test_stopwatch_a_failing_callback_leaves_the_others_called,
    test_stopwatch_a_forked_child_watches_an_event_its_parent_watched,
    test_stopwatch_calls_back_once_set_and_never_after_cancel,
    test_stopwatch_helper_blocks_every_signal_and_restores_the_callers_mask,
    test_stopwatch_helper_ends_with_its_last_subscription,
)

from sched_exclusive import _durations, _stopwatch

__all__ = [
    "test_durations_refuse_what_is_not_one_naming_the_argument",
    "test_durations_take_a_timedelta_or_seconds",
    "test_stopwatch_a_failing_callback_leaves_the_others_called",
    "test_stopwatch_a_forked_child_watches_an_event_its_parent_watched",
    "test_stopwatch_calls_back_once_set_and_never_after_cancel",
    "test_stopwatch_helper_blocks_every_signal_and_restores_the_callers_mask",
    "test_stopwatch_helper_ends_with_its_last_subscription",
]


@pytest.fixture
def durations() -> ModuleType:
    """The copy under test: this package's own ``_durations``."""
    return _durations


@pytest.fixture
def stopwatch() -> ModuleType:
    """The copy under test: this package's own ``_stopwatch``."""
    return _stopwatch
