"""Reading one request: linear-time JSON framing and Go-style payload conversion.

The server frames a request as soon as one complete JSON value has arrived, as
Go's ``json.Decoder`` does: no trailing newline is needed, and nothing after
the value is read. Framing scans each received byte once (a structural scan:
brackets, braces and string boundaries, with the C regex engine skipping
everything else), then the value is decoded once. The size cap counts every
byte from the start of the stream to the end of the value, leading whitespace
included, as Go's ``io.LimitReader`` does.

Decoding follows Go's ``encoding/json``: bytes that are not UTF-8 become
U+FFFD, one per byte; a ``\\u`` escape of a lone surrogate becomes U+FFFD;
``NaN`` and ``Infinity`` are refused, and so is a number too large for a
float64 (``1e400``); of two keys that name the same field, the last one wins;
nesting deeper than 10,000 levels is refused.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Union, final

from ._wire import (
    GO_REPLACE,
    go_fold,
    has_surrogate_escape,
    last_wins,
    refuse_constant,
    replace_surrogates,
)

__all__ = ["MAX_DEPTH", "RequestReader", "Undecodable", "dataclass_decoder", "decode_value"]

#: Go's ``encoding/json`` refuses values nested deeper than this.
MAX_DEPTH = 10_000

_WHITESPACE = b" \t\n\r"
_CONTAINER_START = frozenset(b"[{")
_SCALAR_START = frozenset(b"-0123456789tfn")
# Outside strings only these bytes change the framing state.
_STRUCTURAL = re.compile(rb'["\[\]{}]')
# The rest of a string's body: stops at its closing quote, at a backslash the
# buffer ends on, or at the end of the buffer.
_STRING_BODY = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)
_NUMBER = re.compile(rb"[-+.0-9eE]*")
_LITERALS = {ord("t"): b"true", ord("f"): b"false", ord("n"): b"null"}

_SCANNING, _IN_STRING, _SCALAR = 0, 1, 2


class Undecodable(ValueError):
    """The request is not one JSON value within the size cap, or not a valid payload."""


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        # Go's decoder refuses a number its float64 cannot hold.
        raise ValueError(f"number {text[:32]} out of range")
    return value


_DECODER = json.JSONDecoder(
    parse_constant=refuse_constant, parse_float=_finite_float, object_pairs_hook=last_wins
)


def _replace_surrogates(value: Any) -> Any:
    """Replace each lone surrogate in *value*'s strings and keys with U+FFFD (no recursion)."""
    if isinstance(value, str):
        return replace_surrogates(value)
    root: list[Any] = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        container, key = stack.pop()
        item = container[key]
        if isinstance(item, str):
            container[key] = replace_surrogates(item)
        elif isinstance(item, list):
            stack.extend((item, i) for i in range(len(item)))
        elif isinstance(item, dict):
            fixed = [(replace_surrogates(k), v) for k, v in item.items()]
            if any(k != old for (k, _), old in zip(fixed, item, strict=True)):
                item = last_wins(fixed)
                container[key] = item
            stack.extend((item, k) for k in item)
    return root[0]


def decode_value(data: bytes | bytearray) -> Any:
    """Decode *data*, exactly one JSON value and nothing else, as Go's decoder would.

    Raises:
        Undecodable: *data* is not one valid JSON value.
    """
    text = str(data, "utf-8", GO_REPLACE)
    try:
        value, end = _DECODER.raw_decode(text)
    except json.JSONDecodeError as exc:
        message = exc.msg.removesuffix(" at")
        raise Undecodable(f"invalid JSON: {message} at offset {exc.pos}") from None
    except (ValueError, RecursionError) as exc:
        raise Undecodable(f"invalid JSON: {exc}") from None
    if end != len(text):
        raise Undecodable(f"invalid JSON: unexpected data at offset {end}")
    if has_surrogate_escape(text):
        value = _replace_surrogates(value)
    return value


@final
class RequestReader:
    """Frame one JSON value out of a byte stream, looking at each byte once.

    Args:
        max_size: the cap in bytes on the stream up to the end of the value,
            leading whitespace included.
    """

    __slots__ = ("_buf", "_lead", "_max_size", "_open", "_pos", "_state")

    def __init__(self, max_size: int) -> None:
        self._max_size = max_size
        self._lead = 0  # whitespace before the value: counted, not kept
        self._buf = bytearray()  # the value's bytes so far
        self._pos = 0  # how far into _buf the framing scan got
        self._open = bytearray()  # the closing byte of each container still open
        self._state = _SCANNING

    def feed(self, data: bytes) -> tuple[bool, Any]:
        """Take the next chunk of the stream.

        Returns:
            ``(True, value)`` once one complete value has arrived, else ``(False, None)``.

        Raises:
            Undecodable: the stream cannot start or continue a JSON value, or the
                value outgrows the size cap.
        """
        buf = self._buf
        cap = self._max_size
        if not buf:
            if not self._lead and len(data) <= cap and data[-1:] == b"\n":
                whole = _whole(data)  # the common case: the request is one line in one chunk
                if whole is not None:
                    return True, whole
            stripped = data.lstrip(_WHITESPACE)
            self._lead += len(data) - len(stripped)
            if not stripped:
                if self._lead > cap:
                    raise Undecodable("request too large")
                return False, None
            if self._lead >= cap:
                raise Undecodable("request too large")
            data = stripped
            first = data[0]
            if first == 0x22:  # '"'
                self._state, self._pos = _IN_STRING, 1
            elif first in _SCALAR_START:
                self._state = _SCALAR
            elif first not in _CONTAINER_START:
                raise Undecodable("the request does not start a JSON value")
        room = cap - self._lead - len(buf)
        buf += data[:room] if len(data) > room else data
        end = self._scan()
        if end >= 0:
            return True, decode_value(buf if end == len(buf) else buf[:end])
        if self._lead + len(buf) >= cap:
            # The cap is reached: as with Go's io.LimitReader, the stream ends here.
            return True, self._at_end(oversized=True)
        return False, None

    def feed_eof(self) -> Any:
        """The stream ended: decode what arrived or fail.

        Raises:
            Undecodable: no complete value arrived.
        """
        return self._at_end(oversized=False)

    def _at_end(self, *, oversized: bool) -> Any:
        buf = self._buf
        if self._state == _SCALAR and buf:
            # A bare number ends where the stream ends; a cut literal fails here.
            return decode_value(buf)
        if oversized:
            raise Undecodable("request too large")
        if not buf:
            raise Undecodable("empty request")
        raise Undecodable("invalid JSON: the request ends before its value does")

    def _scan(self) -> int:
        """Advance the framing scan over the new bytes; the value's end offset, or -1."""
        buf = self._buf
        size = len(buf)
        pos = self._pos
        state = self._state
        if state == _SCALAR:
            literal = _LITERALS.get(buf[0])
            if literal is not None:  # complete once its letters are in: decoding checks them
                if size >= len(literal) or not literal.startswith(buf):
                    return min(size, len(literal))
                return -1
            end = _NUMBER.match(buf, pos).end()  # type: ignore[union-attr]  # * always matches
            self._pos = end
            return end if end < size else -1  # a number needs a delimiter (or the end)
        open_ = self._open
        while pos < size:
            if state == _IN_STRING:
                end = _STRING_BODY.match(buf, pos).end()  # type: ignore[union-attr]
                if end >= size or buf[end] != 0x22:  # cut inside the string, or its escape
                    pos = end
                    break
                pos = end + 1
                state = _SCANNING
                if not open_:
                    return pos
                continue
            found = _STRUCTURAL.search(buf, pos)
            if found is None:
                pos = size
                break
            pos = found.end()
            char = buf[pos - 1]
            if char == 0x22:
                state = _IN_STRING
            elif char in _CONTAINER_START:
                open_.append(char + 2)  # "[" + 2 is "]", "{" + 2 is "}"
                if len(open_) > MAX_DEPTH:
                    raise Undecodable("invalid JSON: exceeded max depth")
            elif open_.pop() != char:
                raise Undecodable(f"invalid JSON: mismatched {chr(char)!r} at offset {pos - 1}")
            elif not open_:
                return pos
        self._pos, self._state = pos, state
        return -1


def _whole(data: bytes) -> Any:
    """Decode a first chunk that is exactly one value and a newline, or None."""
    try:
        text = data.decode()
        value, end = _DECODER.raw_decode(text, len(text) - len(text.lstrip(" \t\r\n")))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError too
        return None
    if text[end:].strip(" \t\r\n"):
        return None  # something follows the value: the careful path says what
    if has_surrogate_escape(text):
        value = _replace_surrogates(value)
    return value


# --- converting the parsed JSON into the daemon's payload type -------------------------

Converter = Callable[[Any], Any]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _identity(value: Any) -> Any:
    return value


def _scalar(kind: type, name: str, zero: object) -> Converter:
    def convert(value: Any) -> Any:
        if value is None:
            return zero  # Go leaves the zero value for a null element
        if isinstance(value, bool) and kind is not bool:
            raise Undecodable(f"expected {name}, got a boolean")
        if kind is float and isinstance(value, int):
            try:
                return float(value)
            except OverflowError:
                raise Undecodable("number out of range for a float") from None
        if not isinstance(value, kind):
            raise Undecodable(f"expected {name}, got {type(value).__name__}")
        if isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
            raise Undecodable("number out of range for an int (Go's int64)")
        return value

    return convert


def _list_of(item: Converter) -> Converter:
    def convert(value: Any) -> Any:
        if value is None:
            return []
        if not isinstance(value, list):
            raise Undecodable(f"expected an array, got {type(value).__name__}")
        return [item(v) for v in value]

    return convert


def _dict_of(item: Converter) -> Converter:
    def convert(value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise Undecodable(f"expected an object, got {type(value).__name__}")
        return {k: item(v) for k, v in value.items()}

    return convert


def _optional(inner: Converter) -> Converter:
    def convert(value: Any) -> Any:
        return None if value is None else inner(value)

    return convert


def _converter(annotation: Any) -> Converter:  # noqa: PLR0911
    """Build the converter for one field annotation; unknown shapes pass through."""
    if annotation is Any or annotation is object:
        return _identity
    if annotation is str:
        return _scalar(str, "a string", "")
    if annotation is bool:
        return _scalar(bool, "a boolean", False)
    if annotation is int:
        return _scalar(int, "an integer", 0)
    if annotation is float:
        return _scalar(float, "a number", 0.0)
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return dataclass_decoder(annotation)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        others = [a for a in args if a is not type(None)]
        if len(others) == 1 and len(args) == 2:
            return _optional(_converter(others[0]))
        return _identity
    if origin is list and len(args) == 1:
        return _list_of(_converter(args[0]))
    if origin is dict and len(args) == 2 and args[0] is str:
        return _dict_of(_converter(args[1]))
    return _identity


def dataclass_decoder(cls: type[Any]) -> Converter:
    """Build a converter from parsed JSON to the dataclass *cls*, as Go fills a struct.

    Each key names the field with that exact name, else the first field whose
    name matches it case-insensitively; when two keys name the same field the
    last one wins. Unknown keys are ignored; a missing key, or ``null``, leaves
    the field's default, so a Go daemon's older or newer clients keep working.
    Field annotations ``str``, ``int`` (Go's int64 range), ``float`` (finite),
    ``bool``, ``list[X]``, ``dict[str, X]``, ``X | None`` and nested
    dataclasses are checked and converted; others pass the parsed JSON through.

    Raises:
        TypeError: *cls* is not a dataclass type.
    """
    if not dataclasses.is_dataclass(cls) or not isinstance(cls, type):
        raise TypeError(f"payload_type must be a dataclass type, not {cls!r}")
    hints = typing.get_type_hints(cls)
    fields = [
        (f.name, _converter(hints.get(f.name, Any))) for f in dataclasses.fields(cls) if f.init
    ]
    exact = {name: (name, field_converter) for name, field_converter in fields}
    folded: dict[str, tuple[str, Converter]] = {}
    for name, field_converter in fields:
        folded.setdefault(go_fold(name), (name, field_converter))

    def convert(value: Any) -> Any:
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise Undecodable(f"expected an object, got {type(value).__name__}")
        kwargs = {}
        for key, item in value.items():
            field = exact.get(key) or folded.get(go_fold(key))
            if field is not None and item is not None:
                kwargs[field[0]] = field[1](item)
        try:
            return cls(**kwargs)
        except TypeError as exc:
            # Its message may quote a field's value (a __post_init__ check): never logged.
            raise Undecodable(f"cannot build {cls.__name__}: {type(exc).__name__}") from None

    return convert
