"""The exceptions sched_interval raises, rooted in `IntervalError`."""

from __future__ import annotations

from ._compat import final

__all__ = ["DurationParseError", "IntervalError"]


class IntervalError(ValueError):
    """Base class of every error sched_interval raises.

    Every failure here is a value that breaks the rules, so the base is also a
    `ValueError`: ``except ValueError`` keeps working.
    """

    __module__ = "sched_interval"  # where users import it from, as tracebacks show


@final
class DurationParseError(IntervalError):
    """A string is not a Go duration, or overflows int64 nanoseconds.

    The message is Go's own, for example ``time: invalid duration "banana"``.

    Attributes:
        text: the string that failed to parse, as given.
    """

    __module__ = "sched_interval"

    def __init__(self, message: str, *, text: str = "") -> None:
        super().__init__(message)
        self.text = text
