"""Go's duration grammar: ``time.ParseDuration`` and ``Duration.String``, exactly.

A value in an environment file must mean the same to a Python job runner as to
a Go one, so this module follows Go's algorithm step by step rather than a
regular expression: the same unsigned 64-bit accumulation, the same overflow
checks against ``1 << 63`` (including the wrap-around of the running sum that
Go's ``uint64`` addition performs), and the same float64 arithmetic for
fractions, so a fraction rounds to the nanosecond Go would pick.

Go parses bytes. A Python ``str`` is taken as its UTF-8 encoding, with the
lone surrogates ``os.environ`` uses for undecodable bytes turned back into
those bytes, which only matters for how error messages quote the input.
"""

from __future__ import annotations

from datetime import timedelta

from ._errors import DurationParseError

__all__ = [
    "MAX_DURATION_NS",
    "MIN_DURATION_NS",
    "format_duration",
    "go_quote",
    "ns_from_timedelta",
    "parse_duration",
    "timedelta_from_ns",
]

#: The largest Go ``time.Duration``: 2562047h47m16.854775807s.
MAX_DURATION_NS = (1 << 63) - 1
#: The smallest Go ``time.Duration``: -2562047h47m16.854775808s.
MIN_DURATION_NS = -(1 << 63)

_BIT63 = 1 << 63
_UINT64 = (1 << 64) - 1
_DIGITS = "0123456789"
_NUMBER_CHARS = "0123456789."
_UNITS: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 MICRO SIGN
    "μs": 1_000,  # U+03BC GREEK SMALL LETTER MU
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
# Go's leadingFraction stops accumulating once another digit could push the
# value past 1 << 63; these are its two limits.
_FRACTION_LIMIT = ((1 << 63) - 1) // 10
_ONE_MICROSECOND_NS = 1_000
_US = timedelta(microseconds=1)
# What the ends of Go's range round to: 9223372036854775807 ns is nearer
# 9223372036854776 µs than 9223372036854775 µs, and likewise below zero. A
# timedelta in this range formats, though its last microsecond may lie past
# what Go can hold.
_ROUNDED_MAX_MICROS = 9_223_372_036_854_776


def _go_bytes(text: str) -> bytes:
    """The bytes Go would hold for *text* (UTF-8; surrogate escapes back to bytes)."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        # A lone surrogate outside U+DC80..U+DCFF: keep its WTF-8 bytes, which
        # Go would see as invalid UTF-8 and escape byte by byte.
        return b"".join(
            ch.encode("utf-8", "surrogateescape")
            if not 0xD800 <= ord(ch) <= 0xDFFF or 0xDC80 <= ord(ch) <= 0xDCFF
            else ch.encode("utf-8", "surrogatepass")
            for ch in text
        )


def go_quote(text: str) -> str:
    """Quote *text* the way Go's ``time`` package quotes it in error messages.

    Go escapes every byte of a non-ASCII character and every control character
    below U+0020 as ``\\xNN``, and puts a backslash before ``"`` and ``\\``.

    Args:
        text: the string to quote.

    Returns:
        The quoted string, always printable ASCII.
    """
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    out = ['"']
    for byte in _go_bytes(text):
        if byte < 0x20 or byte >= 0x80:
            out.append(f"\\x{byte:02x}")
        elif byte in (0x22, 0x5C):
            out.append("\\" + chr(byte))
        else:
            out.append(chr(byte))
    out.append('"')
    return "".join(out)


def _invalid(orig: str) -> DurationParseError:
    return DurationParseError(f"time: invalid duration {go_quote(orig)}", text=orig)


def _leading_digits(s: str, start: int) -> int:
    """Index of the first character at or after *start* that is not an ASCII digit."""
    end = start
    length = len(s)
    while end < length and s[end] in _DIGITS:
        end += 1
    return end


def parse_duration(text: str) -> int:
    """Parse a Go duration string into integer nanoseconds, exactly as Go does.

    The grammar is Go's ``time.ParseDuration``: an optional sign, then one or
    more decimal numbers, each with an optional fraction and a unit (``ns``,
    ``us``, ``µs``, ``μs``, ``ms``, ``s``, ``m``, ``h``), such as ``"300ms"``,
    ``"-1.5h"`` or ``"2h45m"``; ``"0"`` alone needs no unit. Fractions round
    to the nanosecond exactly as Go's float64 arithmetic does, and a value
    outside the int64 nanosecond range is an error (``"-9223372036854775808ns"``
    is the smallest valid value).

    Args:
        text: the duration string. No white space is trimmed.

    Returns:
        The duration in nanoseconds, within ``MIN_DURATION_NS..MAX_DURATION_NS``.

    Raises:
        DurationParseError: a `ValueError` whose message is Go's, for example
            ``time: invalid duration "banana"``,
            ``time: missing unit in duration "1"`` or
            ``time: unknown unit "H" in duration "1H"``.
        TypeError: *text* is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"duration must be a str, not {type(text).__name__}")
    s = text
    neg = False
    pos = 0
    length = len(s)
    if length and s[0] in "+-":
        neg = s[0] == "-"
        pos = 1
    if length - pos == 1 and s[pos] == "0":
        return 0
    if pos == length:
        raise _invalid(text)
    total = 0
    while pos < length:
        # The next character must be [0-9.].
        if s[pos] not in _NUMBER_CHARS:
            raise _invalid(text)
        # leadingInt: [0-9]*, an error once the value exceeds 1 << 63.
        int_end = _leading_digits(s, pos)
        pre = int_end != pos
        whole = 0
        if pre:
            digits = s[pos:int_end].lstrip("0")
            if len(digits) > 19:
                raise _invalid(text)
            whole = int(digits) if digits else 0
            if whole > _BIT63:
                raise _invalid(text)
        pos = int_end
        # leadingFraction: (\.[0-9]*)?, accumulating while it cannot overflow.
        frac = 0
        scale = 1.0
        post = False
        if pos < length and s[pos] == ".":
            pos += 1
            frac_end = _leading_digits(s, pos)
            post = frac_end != pos
            for i in range(pos, frac_end):
                if frac > _FRACTION_LIMIT:
                    break
                nxt = frac * 10 + ord(s[i]) - 48
                if nxt > _BIT63:
                    break
                frac = nxt
                scale *= 10.0
            pos = frac_end
        if not pre and not post:
            # No digits at all, as in ".s" or "-.s".
            raise _invalid(text)
        # The unit runs up to the next '.' or digit.
        unit_end = pos
        while unit_end < length and s[unit_end] not in _NUMBER_CHARS:
            unit_end += 1
        if unit_end == pos:
            raise DurationParseError(f"time: missing unit in duration {go_quote(text)}", text=text)
        unit_text = s[pos:unit_end]
        pos = unit_end
        unit = _UNITS.get(unit_text)
        if unit is None:
            raise DurationParseError(
                f"time: unknown unit {go_quote(unit_text)} in duration {go_quote(text)}",
                text=text,
            )
        if whole > _BIT63 // unit:
            raise _invalid(text)
        value = whole * unit
        if frac > 0:
            # float64 keeps fractions of an hour nanosecond-accurate, and
            # uint64(float64) truncates, exactly as int(float) does.
            value += int(float(frac) * (float(unit) / scale))
            if value > _BIT63:
                raise _invalid(text)
        # Go adds in uint64: a sum of exactly 1 << 64 wraps to zero.
        total = (total + value) & _UINT64
        if total > _BIT63:
            raise _invalid(text)
    if neg:
        return -total
    if total > MAX_DURATION_NS:
        raise _invalid(text)
    return total


def _frac(v: int, prec: int, out: list[str]) -> int:
    """Go's fmtFrac: prepend ``.digits`` of v / 10**prec without trailing zeros."""
    printing = False
    for _ in range(prec):
        v, digit = divmod(v, 10)
        printing = printing or digit != 0
        if printing:
            out.append(chr(48 + digit))
    if printing:
        out.append(".")
    return v


def format_duration(value: int | timedelta) -> str:
    """Format a duration exactly as Go's ``time.Duration.String`` does.

    Examples: ``"1h30m0s"``, ``"1.5s"``, ``"300ms"``, ``"1.5µs"``, ``"0s"``,
    ``"-2m3s"``. Units below a second appear only for durations under one
    second; the largest unit is the hour.

    Args:
        value: integer nanoseconds, or a ``timedelta``. A ``timedelta`` may
            reach the microsecond that the ends of Go's range round to
            (±9223372036854776 µs, one past Go's largest whole microsecond),
            so every cadence `parse_interval` returns formats.

    Returns:
        The Go form of the duration.

    Raises:
        ValueError: *value* is an ``int`` outside Go's int64 nanosecond
            range, a ``timedelta`` beyond ±9223372036854776 µs, or a ``bool``.
        TypeError: *value* is neither an ``int`` nor a ``timedelta``.
    """
    if isinstance(value, timedelta):
        micros = value // _US
        if not -_ROUNDED_MAX_MICROS <= micros <= _ROUNDED_MAX_MICROS:
            raise ValueError(f"duration {value!r} is outside the range of a Go time.Duration")
        return _format(micros * _ONE_MICROSECOND_NS)
    if isinstance(value, bool):
        raise ValueError(f"duration must be integer nanoseconds, not a bool ({value!r})")
    if not isinstance(value, int):
        raise TypeError(
            f"duration must be int nanoseconds or a timedelta, not {type(value).__name__}"
        )
    if not MIN_DURATION_NS <= value <= MAX_DURATION_NS:
        raise ValueError(f"duration {value!r} is outside the range of a Go time.Duration")
    return _format(value)


def _format(ns: int) -> str:
    """Go's ``Duration.String`` on *ns* (its algorithm holds for any magnitude)."""
    u = -ns if ns < 0 else ns
    # Built back to front, like Go's buffer, then reversed.
    out: list[str] = []
    if u < 1_000_000_000:
        if u == 0:
            return "0s"
        out.append("s")
        if u < 1_000:
            prec = 0
            out.append("n")
        elif u < 1_000_000:
            prec = 3
            out.append("µ")
        else:
            prec = 6
            out.append("m")
        u = _frac(u, prec, out)
        out.append(str(u)[::-1])
    else:
        out.append("s")
        u = _frac(u, 9, out)
        u, seconds = divmod(u, 60)
        out.append(str(seconds)[::-1])
        if u > 0:
            out.append("m")
            u, minutes = divmod(u, 60)
            out.append(str(minutes)[::-1])
            if u > 0:
                out.append("h")
                out.append(str(u)[::-1])
    if ns < 0:
        out.append("-")
    return "".join(out)[::-1]


def ns_from_timedelta(value: timedelta) -> int:
    """The exact number of nanoseconds in *value* (no int64 range check)."""
    return (value // _US) * _ONE_MICROSECOND_NS


def timedelta_from_ns(ns: int) -> timedelta:
    """Nanoseconds to a ``timedelta``: the nearest microsecond, ties to even.

    Integer arithmetic, exact over the whole int64 range: 9223372036854775807
    ns gives 9223372036854776 µs. A positive duration never becomes zero:
    anything from 1 ns to 500 ns gives one microsecond.
    """
    micros, rest = divmod(ns, _ONE_MICROSECOND_NS)  # floor: rest is 0..999
    if rest > 500 or (rest == 500 and micros % 2):
        micros += 1
    if micros == 0 and ns > 0:
        micros = 1
    return timedelta(microseconds=micros)
