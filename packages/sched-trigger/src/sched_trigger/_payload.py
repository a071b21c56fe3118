"""Converting a parsed request into the daemon's payload type, as Go fills a struct.

Into a dataclass, an object's members apply in order: the last key naming a
field wins, and ``null`` leaves a string, number, boolean or struct field as
it was, and empties a list, a dict, an optional or an ``Any`` field. `plain`
turns the decoder's `Pairs` into dicts for everything else. No message raised
here quotes the payload: messages name types and fields.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any, Union

from ._request import Pairs, Undecodable
from ._wire import go_fold, last_wins

__all__ = ["Converter", "dataclass_decoder", "plain"]

Converter = Callable[[Any], Any]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# What Go sets a field to when its member is null: nil for a pointer, slice, map or
# interface (None, [] or {} here); a string, number, boolean or struct keeps its value.
_KEEP = object()


def plain(value: Any) -> Any:
    """*value* with every `Pairs` turned into a dict (the last of repeated keys wins)."""
    if isinstance(value, Pairs):
        value = last_wins(list(value))
    elif not isinstance(value, list | dict):
        return value
    root = [value]
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        keys = item.keys() if isinstance(item, dict) else range(len(item))
        for key in keys:
            child = item[key]
            if isinstance(child, Pairs):
                child = item[key] = last_wins(list(child))
            if isinstance(child, list | dict):
                stack.append(child)
    return root[0]


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
            raise Undecodable(f"expected {name}, got {_json_type(value)}")
        if isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
            raise Undecodable("number out of range for an int (Go's int64)")
        return value

    convert.null = _KEEP  # type: ignore[attr-defined]
    return convert


def _json_type(value: Any) -> str:
    if isinstance(value, Pairs | dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def _list_of(item: Converter) -> Converter:
    def convert(value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, Pairs) or not isinstance(value, list):
            raise Undecodable(f"expected an array, got {_json_type(value)}")
        return [item(v) for v in value]

    return convert


def _dict_of(item: Converter) -> Converter:
    def convert(value: Any) -> Any:
        if value is None:
            return {}
        if isinstance(value, Pairs):
            return {k: item(v) for k, v in value}
        if not isinstance(value, dict):
            raise Undecodable(f"expected an object, got {_json_type(value)}")
        return {k: item(v) for k, v in value.items()}

    return convert


def _optional(inner: Converter) -> Converter:
    def convert(value: Any) -> Any:
        return None if value is None else inner(value)

    return convert


def _converter(annotation: Any) -> Converter:  # noqa: PLR0911
    """Build the converter for one field annotation; unknown shapes pass through."""
    if annotation is Any or annotation is object:
        return plain
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
        return plain
    if origin is list and len(args) == 1:
        return _list_of(_converter(args[0]))
    if origin is dict and len(args) == 2 and args[0] is str:
        return _dict_of(_converter(args[1]))
    return plain


def dataclass_decoder(cls: type[Any]) -> Converter:
    """Build a converter from parsed JSON to the dataclass *cls*, as Go fills a struct.

    The members of the object apply in order: each key names the field with
    that exact name, else the first field whose name matches it
    case-insensitively, so of two keys naming one field the last wins. A
    ``null`` member leaves a ``str``, ``int``, ``float``, ``bool`` or nested
    dataclass field as it was and sets any other field to its empty value
    (``None``, ``[]``, ``{}``), as Go sets a pointer, slice, map or interface
    to nil. Unknown keys are ignored; a missing key leaves the field's
    default, so a Go daemon's older or newer clients keep working. Field
    annotations ``str``, ``int`` (Go's int64 range), ``float`` (finite),
    ``bool``, ``list[X]``, ``dict[str, X]``, ``X | None`` and nested
    dataclasses are checked and converted; others receive the parsed JSON.

    Raises:
        TypeError: *cls* is not a dataclass type.
    """
    if not dataclasses.is_dataclass(cls) or not isinstance(cls, type):
        raise TypeError(f"payload_type must be a dataclass type, not {cls!r}")
    hints = typing.get_type_hints(cls)
    fields = []
    for f in dataclasses.fields(cls):
        if f.init:
            annotation = hints.get(f.name, Any)
            field_converter = _converter(annotation)
            keeps = getattr(field_converter, "null", None) is _KEEP or (
                isinstance(annotation, type) and dataclasses.is_dataclass(annotation)
            )
            fields.append((f.name, field_converter, keeps))
    exact = {name: (name, conv, keeps) for name, conv, keeps in fields}
    folded: dict[str, tuple[str, Converter, bool]] = {}
    for name, field_converter, keeps in fields:
        folded.setdefault(go_fold(name), (name, field_converter, keeps))

    def convert(value: Any) -> Any:
        if value is None:
            value = ()
        elif isinstance(value, dict):
            value = value.items()
        elif not isinstance(value, Pairs):
            raise Undecodable(f"expected an object, got {_json_type(value)}")
        kwargs = {}
        for key, item in value:
            field = exact.get(key) or folded.get(go_fold(key))
            if field is None:
                continue
            name, field_converter, keeps = field
            if item is None:
                if keeps:
                    continue  # Go: null leaves a string, number, boolean or struct as it was
                kwargs[name] = field_converter(None)
            else:
                kwargs[name] = field_converter(item)
        try:
            return cls(**kwargs)
        except TypeError as exc:
            # Its message may quote a field's value (a __post_init__ check): never logged.
            raise Undecodable(f"cannot build {cls.__name__}: {type(exc).__name__}") from None

    return convert
