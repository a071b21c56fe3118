"""``ParseInterval``: a ``*_INTERVAL`` value to a `Schedule`, by the Go rules.

The rules (the spec's table), applied to the value after Go's
``strings.TrimSpace``:

===========================  ==========================================
raw value                    result
===========================  ==========================================
``""`` (unset)               built-in at the default
``off``, ``disabled``        external (ASCII letters match in any case)
``"0"``, ``"0s"`` (zero)     external, or once with ``zero_as_once``
positive Go duration         built-in at that cadence, clamped by bounds
negative Go duration         built-in at the default, with a warning
anything else                built-in at the default, with a warning
===========================  ==========================================

The decision is made by a pure function, `resolve`, that returns the
schedule together with the warnings as data; `parse_interval` logs them and
the CLI prints them, so neither path pays for what it does not use (the
``logging`` import happens only when there is something to log).
"""

from __future__ import annotations

import os
from datetime import timedelta
from enum import StrEnum
from functools import lru_cache  # already loaded by enum

from ._compat import TYPE_CHECKING, final
from ._errors import DurationParseError, IntervalError
from ._goduration import (
    MAX_DURATION_NS,
    format_duration,
    ns_from_timedelta,
    parse_duration,
    timedelta_from_ns,
)

if TYPE_CHECKING:
    import logging
    from collections.abc import Mapping

    from ._durations import Duration

    #: A duration argument here: a ``timedelta``, seconds, or a Go duration string.
    DurationLike = Duration | str
    #: A ``(low, high)`` pair of bounds; ``None`` (or a bound of zero or less) is no bound.
    Bounds = tuple[DurationLike | None, DurationLike | None]

__all__ = [
    "LOGGER_NAME",
    "IntervalWarning",
    "Mode",
    "Schedule",
    "interval_from_env",
    "parse_interval",
    "resolve",
]

#: The logger warnings go to unless a call passes its own.
LOGGER_NAME = "sched_interval"

# Go's unicode.IsSpace, which strings.TrimSpace uses: the Unicode White_Space
# property. str.strip() would also remove U+001C..U+001F, which Go keeps.
_GO_WHITE_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_SENTINELS = frozenset({"off", "disabled"})
# The Go library's warning messages, exactly: every warning begins with one.
_UNPARSEABLE = "cannot parse interval, using default"
_NEGATIVE = "interval is negative, using default"
_CLAMPED = "interval clamped"


class Mode(StrEnum):
    """How a container job is scheduled; each member prints as its Go name."""

    __module__ = "sched_interval"  # where users import it from

    #: Run once at startup, then on every interval tick (a positive duration,
    #: and the fallback for empty, negative and unparseable values).
    BUILTIN = "built-in"
    #: Idle: runs are triggered out of band (``off``, ``disabled``, and zero
    #: unless ``zero_as_once``).
    EXTERNAL = "external"
    #: Run exactly once, then exit (zero with ``zero_as_once=True``).
    ONCE = "once"


@final
class Schedule:
    """The parsed result of an interval value: a cadence and a `Mode`.

    Immutable and hashable; two schedules are equal when both fields are.
    ``interval`` is the cadence in `Mode.BUILTIN` (always positive when it
    comes from `parse_interval`); the other modes carry the default for
    reference.

    Args:
        interval: the cadence.
        mode: the mode, or its string value (``"built-in"``, ...).

    Raises:
        TypeError: *interval* is not a ``timedelta``.
        ValueError: *mode* is not a mode.
    """

    __module__ = "sched_interval"  # where users import it from
    __slots__ = ("_interval", "_mode")
    __match_args__ = ("interval", "mode")

    _interval: timedelta
    _mode: Mode

    def __init__(self, interval: timedelta, mode: Mode | str) -> None:
        if not isinstance(interval, timedelta):
            raise TypeError(f"interval must be a timedelta, not {type(interval).__name__}")
        object.__setattr__(self, "_interval", interval)
        object.__setattr__(self, "_mode", mode if mode.__class__ is Mode else Mode(mode))

    @property
    def interval(self) -> timedelta:
        """The cadence (meaningful in `Mode.BUILTIN`; the default otherwise)."""
        return self._interval

    @property
    def mode(self) -> Mode:
        """How the job is scheduled."""
        return self._mode

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Schedule is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Schedule is immutable: cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Schedule):
            return self._interval == other._interval and self._mode is other._mode
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._interval, self._mode))

    def __repr__(self) -> str:
        return f"Schedule(interval={self._interval!r}, mode={self._mode!r})"

    def __reduce__(self) -> tuple[type[Schedule], tuple[timedelta, Mode]]:
        return (Schedule, (self._interval, self._mode))

    def __replace__(
        self, *, interval: timedelta | None = None, mode: Mode | str | None = None
    ) -> Schedule:
        """A copy with some fields changed (``copy.replace`` on Python 3.13+)."""
        return Schedule(
            self._interval if interval is None else interval,
            self._mode if mode is None else mode,
        )


@final
class IntervalWarning:
    """One warning `parse_interval` logs, as data.

    ``template`` is the ``%``-style message (Go's message, then its
    attributes as ``key=value``), ``args`` its arguments, and ``extra`` the
    same facts as fields named after Go's attributes, prefixed ``sched_``.
    """

    __slots__ = ("args", "extra", "template")

    def __init__(self, template: str, args: tuple[object, ...], extra: dict[str, object]) -> None:
        self.template = template
        self.args = args
        self.extra = extra

    @property
    def message(self) -> str:
        """The message as the default ``logging`` formatter shows it."""
        return self.template % self.args


def _log_safe(raw: str) -> str:
    """*raw* with lone surrogates spelled as backslash escapes, so any handler can write it."""
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        return raw.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw


@lru_cache(maxsize=64)
def _parse_argument(value: str) -> tuple[int, timedelta]:
    """A Go duration string given as an argument; cached, since these are constants in practice."""
    ns = parse_duration(value)
    return ns, timedelta_from_ns(ns)


def _to_ns(value: DurationLike, what: str) -> tuple[int, timedelta]:
    """A duration argument as (exact nanoseconds, timedelta), within Go's range."""
    if isinstance(value, timedelta):
        td = value
        ns = ns_from_timedelta(value)
    elif isinstance(value, str):
        try:
            ns, td = _parse_argument(value)
        except DurationParseError as exc:
            raise DurationParseError(f"{what}: {exc}", text=value) from None
    else:
        # Imported here: only number-of-seconds arguments need it.
        from ._durations import to_timedelta

        td = to_timedelta(value, name=what)
        ns = ns_from_timedelta(td)
    if not -MAX_DURATION_NS - 1 <= ns <= MAX_DURATION_NS:
        raise IntervalError(
            f"{what} is out of the range of a Go duration (about 292 years): {value!r}"
        )
    return ns, td


def _bound(value: DurationLike | None, what: str) -> tuple[int, timedelta] | None:
    if value is None:
        return None
    ns, td = _to_ns(value, what)
    # A non-positive bound is ignored, so (minute, 0) is a floor alone.
    return (ns, td) if ns > 0 else None


def resolve(
    raw: str | None,
    default: DurationLike,
    *,
    zero_as_once: bool = False,
    bounds: Bounds | None = None,
    name: str = "interval",
    redact_value: bool = False,
) -> tuple[Schedule, list[IntervalWarning]]:
    """Decide the schedule for *raw* and return the warnings instead of logging them.

    This is `parse_interval` without the logging: same arguments (but no
    *logger*), same rules, same exceptions.

    Returns:
        The schedule and the warnings `parse_interval` would log, in order.
    """
    if raw is None:
        raw = ""
    elif not isinstance(raw, str):
        raise TypeError(f"{name}: raw value must be a str or None, not {type(raw).__name__}")
    default_ns, default_td = _to_ns(default, "default")
    if default_ns <= 0:
        raise IntervalError(f"default must be a positive duration, got {default!r}")
    low = high = None
    if bounds is not None:
        low_arg, high_arg = bounds
        low = _bound(low_arg, "low bound")
        high = _bound(high_arg, "high bound")
        if low is not None and high is not None and high[0] < low[0]:
            low, high = high, low

    text = raw.strip(_GO_WHITE_SPACE)
    if not text:
        return Schedule(default_td, Mode.BUILTIN), []
    if len(text) <= 8 and text.isascii() and text.lower() in _SENTINELS:
        return Schedule(default_td, Mode.EXTERNAL), []

    try:
        ns = parse_duration(text)
    except DurationParseError:
        message = _UNPARSEABLE
    else:
        if ns > 0:
            return _positive(ns, low=low, high=high, name=name, redact_value=redact_value)
        if ns == 0:
            return Schedule(default_td, Mode.ONCE if zero_as_once else Mode.EXTERNAL), []
        message = _NEGATIVE
    facts: dict[str, object] = {"name": name}
    if not redact_value:
        facts["value"] = raw
    facts["default"] = format_duration(default_ns)
    return Schedule(default_td, Mode.BUILTIN), [_warning(message, facts)]


def _positive(
    ns: int,
    *,
    low: tuple[int, timedelta] | None,
    high: tuple[int, timedelta] | None,
    name: str,
    redact_value: bool,
) -> tuple[Schedule, list[IntervalWarning]]:
    """A parsed positive cadence, clamped to the bounds."""
    if low is not None and ns < low[0]:
        bound = low
    elif high is not None and ns > high[0]:
        bound = high
    else:
        return Schedule(timedelta_from_ns(ns), Mode.BUILTIN), []
    facts: dict[str, object] = {"name": name}
    if not redact_value:
        facts["requested"] = format_duration(ns)
    facts["clamped_to"] = format_duration(bound[0])
    return Schedule(bound[1], Mode.BUILTIN), [_warning(_CLAMPED, facts)]


def _warning(message: str, facts: dict[str, object]) -> IntervalWarning:
    """Go's *message*, then Go's attributes as ``key=value`` facts, and as ``sched_key`` fields.

    The raw value is shown quoted (``repr``: a typo with spaces, quotes or
    control characters stays readable on one line); in its field, lone
    surrogates are spelled as escapes so any handler can encode it.
    """
    template = (
        message + ":" + "".join(f" {key}=%r" if key == "value" else f" {key}=%s" for key in facts)
    )
    extra = {
        f"sched_{key}": _log_safe(value) if key == "value" else value  # type: ignore[arg-type]
        for key, value in facts.items()
    }
    return IntervalWarning(template, tuple(facts.values()), extra)


def _emit(warnings: list[IntervalWarning], logger: logging.Logger | None) -> None:
    if logger is None:
        import logging

        logger = logging.getLogger(LOGGER_NAME)
    for warning in warnings:
        # stacklevel 3: the record points at the caller of parse_interval.
        logger.warning(warning.template, *warning.args, extra=warning.extra, stacklevel=3)


def parse_interval(
    raw: str | None,
    default: DurationLike,
    *,
    zero_as_once: bool = False,
    bounds: Bounds | None = None,
    name: str = "interval",
    logger: logging.Logger | None = None,
    redact_value: bool = False,
) -> Schedule:
    """Turn a raw ``*_INTERVAL`` value into a `Schedule`, by the Go library's rules.

    The value is trimmed of Unicode white space (Go's ``strings.TrimSpace``),
    then: empty selects `Mode.BUILTIN` at *default*; ``off`` or ``disabled``
    (ASCII letters in any case) select `Mode.EXTERNAL`; a zero duration
    selects `Mode.EXTERNAL`, or `Mode.ONCE` with *zero_as_once*; a positive Go
    duration selects `Mode.BUILTIN` at that cadence, clamped to *bounds*; a
    negative or unparseable value falls back to `Mode.BUILTIN` at *default*
    with a warning. A ``timedelta`` holds microseconds, so a cadence is the
    nearest microsecond to the nanoseconds parsed (ties to even, exactly,
    over the whole int64 range), except that a positive cadence is never
    zero: below half a microsecond it is one.

    Each warning begins with the Go library's message, then gives Go's
    attributes as ``key=value`` facts, and carries the same facts in
    ``extra`` fields named after Go's attributes with the ``sched_`` prefix
    (``name`` is taken by ``LogRecord``). Durations are in Go's form:

    * ``cannot parse interval, using default: name=JOB_INTERVAL
      value='banana' default=6h0m0s`` (fields ``sched_name``,
      ``sched_value``, ``sched_default``);
    * ``interval is negative, using default: name=JOB_INTERVAL value='-1h'
      default=6h0m0s`` (the same fields);
    * ``interval clamped: name=JOB_INTERVAL requested=10s clamped_to=1m0s``
      (``sched_name``, ``sched_requested``, ``sched_clamped_to``).

    With *redact_value*, ``value`` and ``requested`` are left out of both
    the message and the fields, as Go leaves them out. ``sched_value`` spells
    lone surrogates as ``\\udcXX`` escapes.


    Args:
        raw: the value as read, for example from ``os.environ``; ``None``
            counts as unset.
        default: the cadence for every fallback, carried for reference in
            the external and once modes. A ``timedelta``, a number of
            seconds, or a Go duration string such as ``"6h"``. It must be
            positive.
        zero_as_once: a zero duration selects `Mode.ONCE` instead of
            `Mode.EXTERNAL`.
        bounds: ``(low, high)`` to clamp a parsed positive cadence into, each
            a ``timedelta``, seconds, a Go duration string, or ``None``. A
            non-positive or ``None`` bound is ignored; a swapped pair is put
            in order. Bounds never apply to the default, nor to the external
            and once modes. Clamping logs a warning.
        name: the variable's name, given in every warning (``name=``).
        logger: where warnings go; by default ``logging.getLogger("sched_interval")``.
        redact_value: keep the raw value out of every warning (the clamp
            warning keeps only the bound applied). Use it when the value
            passes through secret-capable configuration expansion.

    Returns:
        The schedule.

    Raises:
        IntervalError: *default* is not positive, or *default* or a bound is
            beyond Go's duration range; a `ValueError`.
        DurationParseError: *default* or a bound is a string that is not a
            Go duration; a `ValueError`.
        ValueError: *default* or a bound is a ``bool``, NaN or infinite.
        TypeError: an argument has the wrong type.
    """
    schedule, warnings = resolve(
        raw,
        default,
        zero_as_once=zero_as_once,
        bounds=bounds,
        name=name,
        redact_value=redact_value,
    )
    if warnings:
        _emit(warnings, logger)
    return schedule


def interval_from_env(
    var: str,
    default: DurationLike,
    *,
    zero_as_once: bool = False,
    bounds: Bounds | None = None,
    logger: logging.Logger | None = None,
    redact_value: bool = False,
    environ: Mapping[str, str] | None = None,
) -> Schedule:
    """Read the environment variable *var* and `parse_interval` it, naming warnings after it.

    An unset variable counts as empty: `Mode.BUILTIN` at *default*.

    Args:
        var: the variable's name, for example ``"JOB_INTERVAL"``.
        default: as for `parse_interval`.
        zero_as_once: as for `parse_interval`.
        bounds: as for `parse_interval`.
        logger: as for `parse_interval`.
        redact_value: as for `parse_interval`.
        environ: the mapping to read instead of ``os.environ``.

    Returns:
        The schedule.

    Raises:
        IntervalError: as for `parse_interval`.
        DurationParseError: as for `parse_interval`.
        ValueError: as for `parse_interval`.
        TypeError: as for `parse_interval`.
    """
    source = os.environ if environ is None else environ
    schedule, warnings = resolve(
        source.get(var),
        default,
        zero_as_once=zero_as_once,
        bounds=bounds,
        name=var,
        redact_value=redact_value,
    )
    if warnings:
        _emit(warnings, logger)
    return schedule
