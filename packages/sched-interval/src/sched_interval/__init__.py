"""Go-exact ``*_INTERVAL`` parsing for containerized job runners.

A Python port of the Go scheduler library's interval parsing: Go's duration
grammar (`parse_duration`, `format_duration`), the sentinel and fallback
rules of ``ParseInterval`` (`parse_interval`, `interval_from_env`), and the
`Mode` and `Schedule` they produce. The same value in an environment file
means the same thing to a Python job as to a Go one.

Importing this package loads neither ``logging`` (imported on the first
warning) nor ``typing``, ``dataclasses`` or ``asyncio``.
"""

from ._errors import DurationParseError as DurationParseError
from ._errors import IntervalError as IntervalError
from ._goduration import MAX_DURATION_NS as MAX_DURATION_NS
from ._goduration import MIN_DURATION_NS as MIN_DURATION_NS
from ._goduration import format_duration as format_duration
from ._goduration import parse_duration as parse_duration
from ._interval import LOGGER_NAME as LOGGER_NAME
from ._interval import Mode as Mode
from ._interval import Schedule as Schedule
from ._interval import interval_from_env as interval_from_env
from ._interval import parse_interval as parse_interval

__all__ = [
    "LOGGER_NAME",
    "MAX_DURATION_NS",
    "MIN_DURATION_NS",
    "DurationParseError",
    "IntervalError",
    "Mode",
    "Schedule",
    "format_duration",
    "interval_from_env",
    "parse_duration",
    "parse_interval",
]


# A local constant, so the import loads no typing; type checkers take any
# TYPE_CHECKING as true. They see __version__ and no module __getattr__,
# which would make them accept any attribute name, typos included.
TYPE_CHECKING = False
if TYPE_CHECKING:
    __version__: str
else:

    def __getattr__(name: str) -> str:
        if name == "__version__":
            from importlib.metadata import version

            return version("sched-interval")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


del TYPE_CHECKING  # a helper name, not an export
