"""The wire protocol, byte for byte as the Go library's ``encoding/json`` writes it.

One compact JSON object per line. The client sends its payload as one line; the
server answers with `Event` lines whose keys come in the order ``event``,
``reason``, ``duration_ms``, ``ok``: ``reason`` is omitted when empty,
``duration_ms`` when zero, ``ok`` is always present. Strings are escaped as Go
escapes them: ``<``, ``>``, ``&``, U+2028 and U+2029 as ``\\u`` escapes, the
other control characters as Python's ``json`` does (Go 1.22 and later agree on
``\\b``, ``\\f``, ``\\n``, ``\\r``, ``\\t`` and ``\\u00XX``), every other
non-ASCII character as raw UTF-8. A lone surrogate, which has no UTF-8 form (it
stands for an undecodable byte), is written as a raw U+FFFD, as Go 1.27 (the
Go library's floor) writes each invalid UTF-8 byte; older Go wrote the
``\\ufffd`` escape.

Lines are decoded as Go's ``encoding/json`` decodes them (helpers the server's
request decoding shares): invalid UTF-8 becomes U+FFFD, one per byte, and so
does a ``\\u`` escape of a lone surrogate; of two keys naming one field, the
last one wins, matched with Go's case folding.

This module is on the client's import path: it imports only ``codecs`` (loaded
at interpreter start-up), ``json`` and ``re`` (which ``json`` loads anyway).
"""

from __future__ import annotations

import codecs
import json
import re
from json.encoder import encode_basestring as _quote

from ._errors import final

TYPE_CHECKING = False
if TYPE_CHECKING:
    from datetime import timedelta
    from typing import Any

__all__ = [
    "EVENT_DONE",
    "EVENT_QUEUED",
    "EVENT_STARTED",
    "GO_REPLACE",
    "MAX_EVENT_LINE",
    "MAX_REQUEST_SIZE",
    "Event",
    "encode_event",
    "encode_payload",
    "go_fold",
    "go_quote",
    "has_surrogate_escape",
    "last_wins",
    "refuse_constant",
    "replace_surrogates",
]

#: The request was accepted and waits in the queue.
EVENT_QUEUED = "queued"
#: The request's run has begun.
EVENT_STARTED = "started"
#: The request's final result; always the last event on a connection.
EVENT_DONE = "done"
#: The longest event line a daemon sends, its newline included: the server cuts a
#: longer run reason to fit (saying so), and the clients accept lines this long.
MAX_EVENT_LINE = 64 * 1024

_GO_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
# Compiled on first use: compiling costs more than a whole short CLI exchange.
_go_special: re.Pattern[str] | None = None


def _go_escape(match: re.Match[str]) -> str:
    return _GO_ESCAPES.get(match.group(), "\ufffd")  # a lone surrogate: Go 1.27's raw U+FFFD


def _go_fix(text: str) -> str:
    """Apply Go's extra escapes to JSON text produced with ``ensure_ascii=False``."""
    global _go_special
    if text.isascii():
        if "<" in text or ">" in text or "&" in text:
            return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        return text
    if _go_special is None:
        _go_special = re.compile("[<>&\u2028\u2029\ud800-\udfff]")
    if _go_special.search(text) is None:
        return text
    return _go_special.sub(_go_escape, text)


def go_quote(value: str) -> str:
    """Return *value* as a JSON string literal, escaped exactly as Go's encoder does.

    Args:
        value: any string, lone surrogates included.

    Returns:
        The quoted literal, which always encodes to valid UTF-8.
    """
    return _go_fix(_quote(value))


# --- decoding as Go's encoding/json does ----------------------------------------------

#: The codecs error handler that decodes as Go does: one U+FFFD per invalid byte.
GO_REPLACE = "sched_trigger.go_replace"


def _go_replace(error: UnicodeError) -> tuple[str, int]:
    """One U+FFFD per undecodable byte, as Go's ``utf8.DecodeRune`` walks them."""
    assert isinstance(error, UnicodeDecodeError)
    return "\ufffd" * (error.end - error.start), error.end


codecs.register_error(GO_REPLACE, _go_replace)

# Compiled on first use, like _go_special.
_surrogate_escape: re.Pattern[str] | None = None
_surrogate: re.Pattern[str] | None = None


def has_surrogate_escape(text: str) -> bool:
    """Whether JSON *text* holds a ``\\u`` escape of a UTF-16 surrogate (its only spelling)."""
    global _surrogate_escape
    if "\\u" not in text:
        return False
    if _surrogate_escape is None:
        _surrogate_escape = re.compile(r"\\u[dD][89a-fA-F]")
    return _surrogate_escape.search(text) is not None


def replace_surrogates(text: str) -> str:
    """Replace each lone surrogate in *text* with U+FFFD, as Go decodes a ``\\u`` escape of one."""
    global _surrogate
    if _surrogate is None:
        _surrogate = re.compile("[\ud800-\udfff]")
    return _surrogate.sub("\ufffd", text)


def go_fold(name: str) -> str:
    """Fold *name* for Go's case-insensitive key match (per-character simple folding).

    Go matches a key to a field with ``bytes.EqualFold``: per character, simple
    case folding, so ``ß`` matches ``ẞ`` but not ``ss``, and the Kelvin sign
    matches ``k``.
    """
    if name.isascii():
        return name.lower()
    out = []
    for char in name:
        upper = char.upper()
        if len(upper) == 1:
            lower = upper.lower()
            out.append(lower if len(lower) == 1 else upper)
        else:
            lower = char.lower()
            out.append(lower if len(lower) == 1 else char)
    return "".join(out)


def last_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose repeated keys keep their last value, ordered by last occurrence.

    Go assigns an object's members in order, so the last of two keys naming the
    same field wins; ordering by last occurrence lets a field lookup see that.
    """
    obj = dict(pairs)
    if len(obj) != len(pairs):
        obj = {}
        for key, value in pairs:
            obj.pop(key, None)
            obj[key] = value
    return obj


def refuse_constant(name: str) -> object:
    """``parse_constant`` for ``json``: ``NaN`` and ``Infinity`` are not JSON (Go refuses them)."""
    raise ValueError(f"{name} is not JSON")


#: The request size a daemon takes by default (8 MiB): `Server`'s ``max_request_size``,
#: and how much of standard input the CLI reads.
MAX_REQUEST_SIZE = 8 * 1024 * 1024

_EVENT_FIELDS = {"event": 0, "reason": 1, "duration_ms": 2, "ok": 3}
_INT64_MAX = 2**63 - 1


def _is_int64(value: object) -> bool:
    return type(value) is int and -_INT64_MAX - 1 <= value <= _INT64_MAX


#: What each field of the Event struct takes, by index: a string, a string, an int64, a bool.
_EVENT_CHECKS = (
    lambda value: isinstance(value, str),
    lambda value: isinstance(value, str),
    _is_int64,
    lambda value: isinstance(value, bool),
)


class _Members(list):  # type: ignore[type-arg]
    """A JSON object's members, in order (``object_pairs_hook``): Go applies them so."""

    __slots__ = ()


def _default(value: object) -> object:
    """Serialize a dataclass instance as an object of its fields, in field order."""
    fields = getattr(type(value), "__dataclass_fields__", None)
    if fields is not None and not isinstance(value, type):
        # The caller built a dataclass, so the module is loaded already: no import cost.
        import dataclasses

        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}  # type: ignore[arg-type]
    raise TypeError(
        f"trigger payload of type {type(value).__name__} is not JSON serializable "
        "(use a dataclass, dict, list, str, int, float, bool or None)"
    )


_ENCODER = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_default
)


def encode_payload(payload: object) -> bytes:
    """Encode a request payload as one compact JSON line, the way Go's client frames it.

    Args:
        payload: a dataclass instance (its fields, in order, recursively), or
            anything ``json`` serializes (``dict``, ``list``, ``str``, numbers,
            ``bool``, ``None``). An argless daemon takes ``{}``.

    Returns:
        The line, newline-terminated, as UTF-8 bytes.

    Raises:
        TypeError: a value is not serializable.
        ValueError: a float is NaN or infinite (Go rejects them too), a
            container refers to itself, or the payload nests deeper than
            Python's ``json`` can encode (near 1,000 levels on Python 3.11,
            1,500 on 3.12, 10,000 on 3.13).
    """
    try:
        text = _ENCODER.encode(payload)
    except RecursionError:
        raise ValueError("trigger payload nests too deeply for Python's json to encode") from None
    return (_go_fix(text) + "\n").encode()


def encode_event(kind: str, ok: bool, reason: str = "", duration_ms: int = 0) -> bytes:
    """Encode one event line exactly as Go's ``json.Encoder`` writes the Event struct.

    Args:
        kind: ``queued``, ``started`` or ``done``.
        ok: the run's success (always written).
        reason: omitted when empty.
        duration_ms: whole milliseconds; omitted when zero.

    Returns:
        The newline-terminated UTF-8 line.
    """
    parts = ['{"event":', go_quote(kind)]
    if reason:
        parts.append(',"reason":')
        parts.append(go_quote(reason))
    if duration_ms:
        parts.append(f',"duration_ms":{int(duration_ms)}')
    parts.append(',"ok":true}\n' if ok else ',"ok":false}\n')
    return "".join(parts).encode()


@final
class Event:
    """One line the daemon streams back: ``queued``, ``started`` or the final ``done``.

    A frozen value type. ``kind`` is the event name, ``ok`` and ``reason`` are
    the run's result (meaningful on ``done``; an ok run may carry a reason too),
    ``duration_ms`` the run's whole milliseconds, truncated.
    """

    __slots__ = ("duration_ms", "kind", "ok", "reason")
    __match_args__ = ("kind", "reason", "duration_ms", "ok")

    kind: str
    reason: str
    duration_ms: int
    ok: bool

    def __init__(self, kind: str, reason: str = "", duration_ms: int = 0, ok: bool = False) -> None:
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "duration_ms", duration_ms)
        object.__setattr__(self, "ok", ok)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Event is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Event is immutable; cannot delete {name!r}")

    def __repr__(self) -> str:
        return (
            f"Event(kind={self.kind!r}, reason={self.reason!r}, "
            f"duration_ms={self.duration_ms!r}, ok={self.ok!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return (self.kind, self.reason, self.duration_ms, self.ok) == (
            other.kind,
            other.reason,
            other.duration_ms,
            other.ok,
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.reason, self.duration_ms, self.ok))

    def __reduce__(self) -> tuple[type[Event], tuple[str, str, int, bool]]:
        return (Event, (self.kind, self.reason, self.duration_ms, self.ok))

    @property
    def duration(self) -> timedelta:
        """The run's duration as a ``timedelta`` (whole milliseconds)."""
        from datetime import timedelta

        return timedelta(milliseconds=self.duration_ms)

    def encode(self) -> bytes:
        """Return the event's wire line, byte for byte as the Go server writes it."""
        return encode_event(self.kind, self.ok, self.reason, self.duration_ms)

    @classmethod
    def decode(cls, line: bytes | str) -> Event:
        """Parse one event line as Go's client does: ``json.Unmarshal`` into the Event struct.

        Members are applied in order: a key names the field of that exact name,
        else the field its case-folded form names; ``null`` leaves the field as
        it was (so of two keys naming one field, the last non-null value wins);
        unknown keys are ignored and missing ones keep their zero values. A
        line that is just ``null`` is the zero event (kind ``""``, which the
        clients ignore). Invalid UTF-8 and lone surrogate escapes become U+FFFD.

        Args:
            line: one JSON value, with or without its newline.

        Returns:
            The event.

        Raises:
            ValueError: the line is not a JSON object (or ``null``), a member
                naming a field has the wrong type (Go's int64 for
                ``duration_ms``), or the line nests past the parser's depth.
        """
        text = line if isinstance(line, str) else str(line, "utf-8", GO_REPLACE)
        try:
            obj: Any = json.loads(text, object_pairs_hook=_Members, parse_constant=refuse_constant)
        except (ValueError, RecursionError) as exc:  # a line nested past the parser's depth
            raise ValueError(f"malformed event line: {exc}") from None
        if obj is None:  # Unmarshal of null into a struct changes nothing
            return cls("")
        if not isinstance(obj, _Members):
            raise ValueError("malformed event line: not a JSON object")
        fields: list[Any] = ["", "", 0, False]
        for key, value in obj:
            index = _EVENT_FIELDS.get(key)
            if index is None:
                index = _EVENT_FIELDS.get(go_fold(key))
            if index is None or value is None:  # unknown, or null: nothing changes
                continue
            if not _EVENT_CHECKS[index](value):
                raise ValueError(f"malformed event line: {key!r} has the wrong type")
            fields[index] = value
        kind, reason, duration_ms, ok = fields
        if has_surrogate_escape(text):
            kind, reason = replace_surrogates(kind), replace_surrogates(reason)
        return cls(kind, reason, duration_ms, ok)
