"""Reading one request: incremental JSON framing and payload conversion.

The server decodes a request as soon as one complete JSON value has arrived, as
Go's ``json.Decoder`` does: no trailing newline is needed, and whatever follows
the value is ignored. Bytes that are not UTF-8 become U+FFFD, one per byte, as
Go's decoder replaces them. ``NaN`` and ``Infinity`` are not JSON and are
refused, as Go refuses them.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Union, final

__all__ = ["RequestReader", "Undecodable", "dataclass_decoder"]

_HANDLER = "sched_trigger.go_replace"


def _go_replace(error: UnicodeError) -> tuple[str, int]:
    """One U+FFFD per undecodable byte, as Go's ``utf8.DecodeRune`` walks them."""
    assert isinstance(error, UnicodeDecodeError)
    return "\ufffd" * (error.end - error.start), error.end


codecs.register_error(_HANDLER, _go_replace)
_Utf8Decoder = codecs.getincrementaldecoder("utf-8")

_WHITESPACE = " \t\n\r"
_VALUE_START = frozenset('{["-0123456789tfn')
# The last byte of a chunk that may complete a value that is not a bare number.
_MAY_END = frozenset(b'}]"el')
# What may still follow a bare number's digits: the rest of the number.
_NUMBER_TAIL = re.compile(r"(?:\.\d*)?(?:[eE][-+]?\d*)?")
_LITERAL_PREFIXES = frozenset(
    p for word in ("true", "false", "null") for p in (word[:i] for i in range(1, len(word)))
) | {"-"}


class Undecodable(ValueError):
    """The request is not one JSON value within the size cap, or not a valid payload."""


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


@final
class RequestReader:
    """Frame one JSON value out of a byte stream, incrementally.

    Args:
        max_size: the request's size cap in bytes (the value, not what follows it).
    """

    __slots__ = ("_attempted", "_decoder", "_max_size", "_parts", "_size", "_started")

    def __init__(self, max_size: int) -> None:
        self._max_size = max_size
        self._decoder: codecs.IncrementalDecoder | None = None
        self._parts: list[str] = []
        self._size = 0
        self._attempted = 0
        self._started = False

    def feed(self, data: bytes) -> tuple[bool, Any]:
        """Take the next chunk of the stream.

        Returns:
            ``(True, value)`` once one complete value has arrived, else ``(False, None)``.

        Raises:
            Undecodable: the stream cannot start or continue a JSON value, or the
                value outgrows the size cap.
        """
        if not self._size and len(data) <= self._max_size and data.endswith(b"\n"):
            # The common case: the whole request in one chunk, newline-terminated.
            fast = self._whole(data)
            if fast is not None:
                return fast
        self._size += len(data)
        if self._decoder is None:
            self._decoder = _Utf8Decoder(errors=_HANDLER)
        text = self._decoder.decode(data)
        self._parts.append(text)
        if not self._started:
            stripped = "".join(self._parts).lstrip(_WHITESPACE)
            if not stripped:
                return False, None
            if stripped[0] not in _VALUE_START:
                raise Undecodable("the request does not start a JSON value")
            self._started = True
        if self._size > self._max_size:
            return self._final(oversized=True)
        # Parsing is O(size): try when the chunk may end a value (a newline, or a
        # closing byte), else only each time the request doubled, so a large
        # request costs O(size) in all, not O(size²).
        tail = data.rstrip(b" \t\r\n")
        if b"\n" in data or (tail and tail[-1] in _MAY_END) or self._size >= 2 * self._attempted:
            self._attempted = self._size
            return self._attempt(final=False)
        return False, None

    def _whole(self, data: bytes) -> tuple[bool, Any] | None:
        """Decode a first chunk that holds a whole line, or None to take the long way."""
        try:
            text = data.decode()
            value, end = _DECODER.raw_decode(text, len(text) - len(text.lstrip(_WHITESPACE)))
        except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError too
            return None
        if text[end:].lstrip(_WHITESPACE):
            return None  # something follows the value on the line: the careful path
        return True, value

    def feed_eof(self) -> Any:
        """The stream ended: decode what arrived or fail.

        Raises:
            Undecodable: no complete value arrived.
        """
        if self._decoder is not None:
            self._parts.append(self._decoder.decode(b"", True))
        done, value = self._final(oversized=False)
        assert done
        return value

    def _final(self, *, oversized: bool) -> tuple[bool, Any]:
        try:
            done, value, end = self._decode(final=True)
        except Undecodable:
            if oversized:
                raise Undecodable("request too large") from None
            raise
        assert done
        if oversized:
            used = len("".join(self._parts)[:end].encode("utf-8", "replace"))
            if used > self._max_size:
                raise Undecodable("request too large")
        return True, value

    def _attempt(self, *, final: bool) -> tuple[bool, Any]:
        done, value, _ = self._decode(final=final)
        return done, value

    def _decode(self, *, final: bool) -> tuple[bool, Any, int]:
        text = "".join(self._parts)
        if len(self._parts) > 1:
            self._parts = [text]
        start = len(text) - len(text.lstrip(_WHITESPACE))
        if start == len(text):
            if final:
                raise Undecodable("empty request")
            return False, None, 0
        try:
            value, end = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError as exc:
            if not final and _truncated(text, exc):
                return False, None, 0
            raise Undecodable(f"invalid JSON: {exc.msg} at offset {exc.pos}") from None
        except (ValueError, RecursionError) as exc:
            raise Undecodable(f"invalid JSON: {exc}") from None
        if isinstance(value, int | float) and not isinstance(value, bool):
            # A bare number is complete only once a delimiter follows it.
            rest = text[end:]
            if _NUMBER_TAIL.fullmatch(rest) and not final:
                return False, None, 0
            if rest and rest[0] not in _WHITESPACE:
                raise Undecodable("invalid JSON: malformed number")
        return True, value, end


def _truncated(text: str, exc: json.JSONDecodeError) -> bool:
    """Whether *text* failed only because more of a valid value is still to come."""
    pos = exc.pos
    if pos >= len(text) or exc.msg.startswith("Unterminated string"):
        return True
    rest = text[pos:]
    if exc.msg == "Expecting value" and rest in _LITERAL_PREFIXES:
        return True
    if exc.msg.startswith("Invalid \\uXXXX escape") and len(text) - pos < 6:
        return True
    # A number cut after its point or exponent mark: "1." or "1e+".
    return (
        pos > 0
        and text[pos - 1].isdigit()
        and rest[0] in ".eE"
        and bool(_NUMBER_TAIL.fullmatch(rest))
    )


# --- converting the parsed JSON into the daemon's payload type -------------------------

Converter = Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


def _scalar(kind: type, name: str) -> Converter:
    def convert(value: Any) -> Any:
        if isinstance(value, bool) and kind is not bool:
            raise Undecodable(f"expected {name}, got a boolean")
        if kind is float and isinstance(value, int):
            return float(value)
        if not isinstance(value, kind):
            raise Undecodable(f"expected {name}, got {type(value).__name__}")
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
        return _scalar(str, "a string")
    if annotation is bool:
        return _scalar(bool, "a boolean")
    if annotation is int:
        return _scalar(int, "an integer")
    if annotation is float:
        return _scalar(float, "a number")
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


def _lookup(obj: dict[str, Any], name: str) -> tuple[bool, Any]:
    """Find a field's key as Go does: exact match first, else case-insensitive."""
    if name in obj:
        return True, obj[name]
    folded = name.casefold()
    found: tuple[bool, Any] = (False, None)
    for key, value in obj.items():
        if key.casefold() == folded:
            found = (True, value)
    return found


def dataclass_decoder(cls: type[Any]) -> Converter:
    """Build a converter from parsed JSON to the dataclass *cls*, Go-style.

    Unknown keys are ignored and missing keys (or ``null`` values) take the
    field's default, as a Go daemon accepts an older or newer client's frame.
    Field annotations ``str``, ``int``, ``float``, ``bool``, ``list[X]``,
    ``dict[str, X]``, ``X | None`` and nested dataclasses are checked and
    converted; others pass the parsed JSON through.

    Raises:
        TypeError: *cls* is not a dataclass type.
    """
    if not dataclasses.is_dataclass(cls) or not isinstance(cls, type):
        raise TypeError(f"payload_type must be a dataclass type, not {cls!r}")
    hints = typing.get_type_hints(cls)
    fields = [
        (f.name, _converter(hints.get(f.name, Any))) for f in dataclasses.fields(cls) if f.init
    ]

    def convert(value: Any) -> Any:
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise Undecodable(f"expected an object, got {type(value).__name__}")
        kwargs = {}
        for name, field_converter in fields:
            present, item = _lookup(value, name)
            if present and item is not None:
                kwargs[name] = field_converter(item)
        try:
            return cls(**kwargs)
        except TypeError as exc:
            # Its message may quote a field's value (a __post_init__ check): never logged.
            raise Undecodable(f"cannot build {cls.__name__}: {type(exc).__name__}") from None

    return convert
