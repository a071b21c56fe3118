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
)

from sched_interval import _durations

__all__ = [
    "test_durations_refuse_what_is_not_one_naming_the_argument",
    "test_durations_take_a_timedelta_or_seconds",
]


@pytest.fixture
def durations() -> ModuleType:
    """The copy under test: this package's own ``_durations``."""
    return _durations
