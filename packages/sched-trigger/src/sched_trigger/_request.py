"""Reading one request: framing in C-speed passes, sliced decoding, Go-style payloads.

The server frames a request as soon as one complete JSON value has arrived, as
Go's ``json.Decoder`` does: no trailing newline is needed. Framing never takes
a Python step per byte or per bracket: each received chunk is reduced to its
skeleton, then to its brackets outside strings, by a few whole-chunk passes in
C (``bytes.translate``, ``bytes.replace``, ``bytes.count``), which keeps the
nesting depth at every chunk boundary exactly, pairs brackets so that one of
the wrong kind is refused as it arrives, and notes whether a number a float64
may not hold can be in it; the chunk is decoded from UTF-8 as it arrives. A
container is complete once its brackets balance at the end of a read (a
client's request always ends a write); the value is then decoded once, from
its first byte. The size cap counts every byte from the start of the stream
to the end of the value, leading whitespace included, as Go's
``io.LimitReader`` does.

Decoding is `decoding`, a generator that does at most about `SLICE` bytes of
work between two yields, so the server runs a large request as a chain of
short loop callbacks. It decodes batches of a container's elements with the
C decoder, cutting at a separator it then verifies (the batch must parse
exactly up to the cut), and walks into an element only when a batch fails:
close to ``json.loads``' own cost, and no recursion, so nesting goes as deep
as Go's 10,000 levels.

Decoding follows Go's ``encoding/json``: bytes that are not UTF-8 become
U+FFFD, one per byte; a ``\\u`` escape of a lone surrogate becomes U+FFFD;
``NaN`` and ``Infinity`` are refused, and so is a number too large for a
float64 (``1e400``, an integer of 400 digits: Go decodes an untyped number
into a float64); nesting deeper than 10,000 levels is refused. Into a
dataclass, an object's members apply in order as Go fills a struct: the last
key naming a field wins, and ``null`` leaves a string, number, boolean or
struct field as it was, and empties a list, a dict, an optional or an ``Any``
field.

No message raised here quotes the payload: messages name types and offsets.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import re
import types
import typing
from collections.abc import Callable, Generator
from typing import Any, Union, final

from ._wire import GO_REPLACE, go_fold, has_surrogate_escape, last_wins, replace_surrogates

__all__ = [
    "MAX_DEPTH",
    "NOTHING",
    "SLICE",
    "WHOLE",
    "Pairs",
    "RequestReader",
    "Undecodable",
    "dataclass_decoder",
    "decode_value",
    "decoding",
    "finish",
    "whole",
]

#: Go's ``encoding/json`` refuses values nested deeper than this.
MAX_DEPTH = 10_000
#: About how many bytes of decoding work `decoding` does between two yields.
SLICE = 32 * 1024
#: A first chunk up to this size that holds the whole request is decoded at once (`whole`).
WHOLE = 64 * 1024
# An element probed on its own is first tried within this many characters.
_PROBE = 512
# Above this depth the C decoder (which recurses) is kept to scalars.
_C_DEPTH = 500

_WHITESPACE = b" \t\n\r"
_SKIP = re.compile(r"[ \t\n\r]*")
_SCALAR_START = frozenset(b"-0123456789tfn")
_NUMBER = re.compile(rb"[-+.0-9eE]*")
_LITERALS = {ord("t"): b"true", ord("f"): b"false", ord("n"): b"null"}
# Every byte but the ones framing looks at: quotes and brackets.
_NOT_STRUCTURAL = bytes(b for b in range(256) if b not in b'"[]{}')
# A chunk's skeleton keeps these, digits mapped to 0, E to e and - to +: see _scan.
_NOT_SKELETON = bytes(b for b in range(256) if b not in b'"[]{},:0123456789eE+-')
_SKELETON = bytes(
    0x30 if 0x30 <= b <= 0x39 else 0x65 if b == 0x45 else 0x2B if b == 0x2D else b
    for b in range(256)
)
# A number a float64 may not hold has an exponent of three digits or more, or (with an
# exponent of at most 99) over 200 digits in a row. Looked for in one translate and three
# substring searches (a regular expression without a literal prefix tries every position:
# five times json.loads).
_NUMBER_SHAPE = bytes(
    0x30 if chr(b).isdigit() and b < 0x80 else 0x65 if b in b"eE" else 0x2B if b in b"+-" else 0x20
    for b in range(256)
)
_BIG_NUMBER_SHAPES = (b"e000", b"e+000", b"0" * 200)
_FLOAT_MAX = 1.7976931348623157e308

_CONTAINER, _STRING, _SCALAR = 1, 2, 3
# What a chunk keeps of the last one's end: a number's pattern may straddle the two.
_TAIL = 256
_CLOSE_OF = bytes.maketrans(b"[{", b"]}")
_MATCH_PASSES = 16


class Undecodable(ValueError):
    """The request is not one JSON value within the size cap, or not a valid payload."""


@final
class Pairs(list[tuple[str, Any]]):
    """A JSON object's members in order, repeats kept: what a dataclass is filled from."""

    __slots__ = ()


def _refuse_constant(name: str) -> object:
    raise ValueError("NaN and Infinity are not JSON")  # Go refuses them; never quote the payload


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError("number out of range for a float64")  # Go's decoder refuses it
    return value


def _float_range_int(text: str) -> int:
    value = int(text)
    if len(text) > 308 and abs(value) > _FLOAT_MAX:
        # Go decodes an untyped number into a float64: past its range it is refused.
        raise ValueError("number out of range for a float64")
    return value


def _decoder(*, pairs: bool, careful: bool) -> json.JSONDecoder:
    return json.JSONDecoder(
        parse_constant=_refuse_constant,
        object_pairs_hook=Pairs if pairs else None,
        parse_float=_finite_float if careful else None,
        parse_int=_float_range_int if careful else None,
    )


# [pairs][careful]: the careful ones check every number in Python, so they only
# run when a number that may overflow shows anywhere in the request.
_DECODERS = {
    (pairs, careful): _decoder(pairs=pairs, careful=careful)
    for pairs in (False, True)
    for careful in (False, True)
}


# The careful decoders, for `whole`.
_CAREFUL = _DECODERS[(False, True)].raw_decode
_CAREFUL_PAIRS = _DECODERS[(True, True)].raw_decode


def _invalid(exc: Exception, offset: int = 0) -> Undecodable:
    """The error for a decoder failure; a JSON syntax error says where, never what."""
    if isinstance(exc, json.JSONDecodeError):
        message = exc.msg.removesuffix(" at").removesuffix(" starting")
        return Undecodable(f"invalid JSON: {message} at offset {exc.pos + offset}")
    if isinstance(exc, RecursionError):
        return Undecodable("invalid JSON: exceeded max depth")
    text = str(exc)
    if "out of range" in text or "NaN" in text or "digits" in text:
        return Undecodable(f"invalid JSON: {text.partition(':')[0]}")
    return Undecodable(f"invalid JSON: {type(exc).__name__}")


# --- decoding in slices ------------------------------------------------------------------


@final
class _Frame:
    """A container being decoded element by element (or batch by batch)."""

    __slots__ = ("after_comma", "close", "items", "key", "pairs", "probe_until", "sep", "sep_at")

    def __init__(self, opener: str, pairs: bool) -> None:
        self.close = "]" if opener == "[" else "}"
        self.pairs = pairs
        self.items: Any = [] if opener == "[" else Pairs() if pairs else {}
        self.key: str | None = None  # the member whose value is being decoded
        self.after_comma = False  # a close right after a comma is invalid
        self.probe_until = -1  # below this offset, elements are taken one at a time
        self.sep = ""  # the text between two elements seen last, if structural
        self.sep_at = 0  # where the comma is in sep

    def add(self, value: Any) -> None:
        if self.close == "]":
            self.items.append(value)
        elif self.pairs:
            assert self.key is not None
            self.items.append((self.key, value))
        else:
            self.items[self.key] = value
        self.key = None

    def learn_separator(self, text: str, comma: int, after: int) -> None:
        """Remember the text between two elements when it is structural (``},{``)."""
        last = comma - 1
        while last >= 0 and text[last] in " \t\n\r":
            last -= 1
        if last >= 0 and text[last] in '"]}' and text[after] in '"[{':
            self.sep = text[last : after + 1]
            self.sep_at = comma - last

    def merge(self, batch: Any) -> None:
        if isinstance(self.items, dict):
            self.items.update(batch)
        else:
            self.items.extend(batch)


def decoding(
    data: bytes | bytearray, *, pairs: bool = False
) -> Generator[None, None, tuple[Any, int]]:
    """Decode the JSON value at the start of *data* as Go would, yielding between slices.

    Args:
        data: the value's bytes (anything after the value is ignored).
        pairs: objects as `Pairs` (for a dataclass) rather than dicts (last key wins).

    Returns:
        ``(value, end)``: the value and the offset in characters where it ended.

    Raises:
        Undecodable: *data* does not start with one valid JSON value.
    """
    text = str(data, "utf-8", GO_REPLACE)
    careful = _may_overflow(data.translate(_NUMBER_SHAPE))
    return (yield from _decoding(text, pairs=pairs, careful=careful, escapes=None))


def _may_overflow(shape: bytes | bytearray) -> bool:
    """Whether a number-shaped text (see `_NUMBER_SHAPE`) holds a number a float64 may not."""
    return any(big in shape for big in _BIG_NUMBER_SHAPES)


def _decoding(
    text: str, *, pairs: bool, careful: bool, escapes: bool | None
) -> Generator[None, None, tuple[Any, int]]:
    """`decoding`, of text already decoded from UTF-8; *escapes*: surrogate escapes seen."""
    decode = _DECODERS[(pairs, careful)].raw_decode
    size = len(text)
    stack: list[_Frame] = []
    pos = _SKIP.match(text).end()  # type: ignore[union-attr]
    if pos >= size:
        raise Undecodable("empty request")
    if size - pos <= SLICE:  # small: one call of the C decoder, unless it nests too deep
        try:
            value, end = decode(text, pos)
        except RecursionError:
            pass
        except ValueError as exc:
            raise _invalid(exc) from None
        else:
            return _done(value, end, text, escapes)
    mode = _VALUE
    work = 0
    closed: Any = None
    while True:
        if work >= SLICE:
            work = 0
            yield
        if mode == _VALUE:  # at the start of a value: the whole request, or an element
            char = text[pos : pos + 1]
            if char in ("[", "{") and char:
                if stack and len(stack) <= _C_DEPTH:
                    # An element on its own: a small one decodes whole, within a probe.
                    try:
                        value, end = decode(text[pos : pos + _PROBE])
                    except (ValueError, RecursionError):
                        pass  # large, deep or faulty: walk into it
                    else:
                        stack[-1].add(value)
                        work += end
                        pos += end
                        mode = _AFTER
                        continue
                if len(stack) >= MAX_DEPTH:
                    raise Undecodable("invalid JSON: exceeded max depth")
                frame = _Frame(char, pairs)
                if stack:
                    # Where the parent's batch failed, so would the child's: walk on.
                    frame.probe_until = stack[-1].probe_until
                stack.append(frame)
                pos += 1
                mode = _ELEMENT
                continue
            try:
                value, end = decode(text, pos)
            except (ValueError, RecursionError) as exc:
                raise _invalid(exc) from None
            if not stack:
                return _done(value, end, text, escapes)
            stack[-1].add(value)
            work += end - pos
            pos = end
            mode = _AFTER
            continue
        frame = stack[-1]
        pos = _SKIP.match(text, pos).end()  # type: ignore[union-attr]
        if pos >= size:
            raise Undecodable(
                f"invalid JSON: the request ends before its value does at offset {pos}"
            )
        char = text[pos]
        if mode == _AFTER:  # after an element: a comma or the close
            if char == ",":
                after = _SKIP.match(text, pos + 1).end()  # type: ignore[union-attr]
                if not frame.sep and after < size:
                    frame.learn_separator(text, pos, after)
                frame.after_comma = True
                pos = after
                mode = _ELEMENT
                continue
            if char != frame.close:
                raise Undecodable(f"invalid JSON: Expecting ',' delimiter at offset {pos}")
        elif char == frame.close:  # _ELEMENT, at the close
            if frame.after_comma:
                raise Undecodable(f"invalid JSON: Expecting value at offset {pos}")
        else:  # _ELEMENT: one, or a batch of them
            if frame.close == "}" and char != '"':
                raise Undecodable(
                    "invalid JSON: Expecting property name enclosed in double quotes "
                    f"at offset {pos}"
                )
            if pos > frame.probe_until and len(stack) <= _C_DEPTH:
                after, closes = _batch(text, pos, frame, decode)
                work += SLICE
                if after >= 0:
                    pos = after
                    if not closes:
                        frame.after_comma = True
                        continue  # the next batch
                    char = frame.close  # the batch ran to the container's close
                    pos -= 1
            if char != frame.close:
                if frame.close == "}":
                    try:
                        key, end = decode(text, pos)
                    except (ValueError, RecursionError) as exc:
                        raise _invalid(exc) from None
                    frame.key = key
                    end = _SKIP.match(text, end).end()  # type: ignore[union-attr]
                    if text[end : end + 1] != ":":
                        raise Undecodable(f"invalid JSON: Expecting ':' delimiter at offset {end}")
                    pos = _SKIP.match(text, end + 1).end()  # type: ignore[union-attr]
                    work += pos - end
                mode = _VALUE
                continue
        # The close of stack[-1] is at pos.
        closed = stack.pop().items
        pos += 1
        if not stack:
            return _done(closed, pos, text, escapes)
        stack[-1].add(closed)
        mode = _AFTER


_VALUE, _ELEMENT, _AFTER = 0, 1, 2


def _batch(
    text: str, pos: int, frame: _Frame, decode: Callable[..., tuple[Any, int]]
) -> tuple[int, bool]:
    """Decode elements from *pos* up to a separator about `SLICE` on, verified by the decoder.

    Returns:
        ``(offset after the batch's last comma, False)``, or ``(offset after the
        container's close, True)``, or ``(-1, False)`` when no batch fits (the
        caller then takes one element on its own).
    """
    size = len(text)
    cut = -1
    if frame.sep:
        cut = text.find(frame.sep, pos + SLICE)
        if cut >= 0:
            cut += frame.sep_at
    if cut < 0:
        cut = text.find(",", pos + SLICE)
    stop = cut if cut >= 0 else min(size, pos + 2 * SLICE)
    opener = "[" if frame.close == "]" else "{"
    piece = "".join((opener, text[pos:stop], frame.close))
    try:
        batch, end = decode(piece)
    except (ValueError, RecursionError):
        frame.probe_until = stop
        return -1, False
    if end < len(piece):
        # The container closed inside the piece: piece[end - 1] is its close.
        frame.merge(batch)
        return pos + end - 1, True
    if cut >= 0:
        frame.merge(batch)
        return cut + 1, False
    frame.probe_until = stop  # only the close we added ended it: not a batch
    return -1, False


def _done(value: Any, end: int, text: str, escapes: bool | None = None) -> tuple[Any, int]:
    if _has_escapes(text) if escapes is None else escapes:
        value = _replace_surrogates(value)
    return value, end


def _has_escapes(text: str) -> bool:
    """`has_surrogate_escape`, after a one-character search (a memchr: twenty times faster)."""
    return "\\" in text and has_surrogate_escape(text)


T = typing.TypeVar("T")


def finish(steps: Generator[None, None, T]) -> T:
    """Run a decoding generator to its end at once; what it returns."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


def decode_value(data: bytes | bytearray, *, pairs: bool = False) -> Any:
    """Decode *data*, exactly one JSON value and nothing else, as Go's decoder would.

    Raises:
        Undecodable: *data* is not one valid JSON value.
    """
    value, end = finish(decoding(data, pairs=pairs))
    text = str(data, "utf-8", GO_REPLACE)
    rest = _SKIP.match(text, end).end()  # type: ignore[union-attr]
    if rest != len(text):
        raise Undecodable(f"invalid JSON: unexpected data at offset {rest}")
    return value


def _replace_surrogates(value: Any) -> Any:
    """Replace each lone surrogate in *value*'s strings and keys with U+FFFD (no recursion)."""
    if isinstance(value, str):
        return replace_surrogates(value)
    root: list[Any] = [value]
    # (container, key, member): member marks the value half of a Pairs member's tuple.
    stack: list[tuple[Any, Any, bool]] = [(root, 0, False)]
    while stack:
        container, key, member = stack.pop()
        item = container[key][1] if member else container[key]
        fixed = item
        if isinstance(item, str):
            fixed = replace_surrogates(item)
        elif isinstance(item, Pairs):
            for i, (name, inner) in enumerate(item):
                item[i] = (replace_surrogates(name), inner)
                stack.append((item, i, True))
        elif isinstance(item, list):
            stack.extend((item, i, False) for i in range(len(item)))
        elif isinstance(item, dict):
            pairs = [(replace_surrogates(k), v) for k, v in item.items()]
            if any(k != old for (k, _), old in zip(pairs, item, strict=True)):
                fixed = last_wins(pairs)
            stack.extend((fixed, k, False) for k in fixed)
        if fixed is not item:
            container[key] = (container[key][0], fixed) if member else fixed
    return root[0]


# --- framing -------------------------------------------------------------------------------


@final
class RequestReader:
    """Frame one JSON value out of a byte stream, with whole-chunk passes in C.

    `feed` takes the stream's chunks until it reports the value complete;
    `decoding` then decodes it in slices.

    Args:
        max_size: the cap in bytes on the stream up to the end of the value,
            leading whitespace included.
        pairs: decode objects as `Pairs` (for a dataclass payload).
    """

    __slots__ = (
        "_buf",
        "_careful",
        "_depth",
        "_escape",
        "_in_string",
        "_kind",
        "_lead",
        "_max_size",
        "_open",
        "_oversized",
        "_pairs",
        "_parts",
        "_pos",
        "_size",
        "_tail",
        "_undecoded",
        "_value",
    )

    def __init__(self, max_size: int, *, pairs: bool = False) -> None:
        self._max_size = max_size
        self._pairs = pairs
        self._value: Any = NOTHING  # a whole first chunk, decoded at once
        # Prepared chunk by chunk, so that decoding starts with no pass over it all:
        self._undecoded = b""  # a character's first bytes, cut off by the end of a read
        self._parts: list[str] = []
        self._careful = False  # a number a float64 may not hold may be in it
        self._tail = b""  # the last bytes of the last chunk, for a pattern cut in two
        self._lead = 0  # whitespace before the value: counted, not kept
        self._size = 0  # the value's bytes so far
        self._buf = bytearray()  # a bare number's or literal's bytes (others go to _parts)
        self._kind = 0
        self._depth = 0  # brackets opened minus closed, outside strings
        self._in_string = False
        self._escape = False  # the last chunk ended on a backslash inside a string
        self._pos = 0  # how far a scalar's scan got
        self._oversized = False
        self._open: bytes | None = b""  # the brackets still open, outermost first

    @property
    def size(self) -> int:
        """The bytes the request holds so far (its value's, leading whitespace aside)."""
        return self._size

    def feed(self, data: bytes) -> bool:
        """Take the next chunk of the stream.

        Returns:
            Whether the value is complete (or the cap reached): call `decoding` then.

        Raises:
            Undecodable: the stream cannot start a JSON value, nests deeper
                than `MAX_DEPTH`, or only whitespace outgrows the cap.
        """
        cap = self._max_size
        first_chunk = not self._size
        if first_chunk:
            if not self._lead and len(data) <= cap:
                value = whole(data, self._pairs)  # the common case: one line in one read
                if value is not NOTHING:
                    self._value = value
                    self._size = len(data)
                    return True
            stripped = data.lstrip(_WHITESPACE)
            self._lead += len(data) - len(stripped)
            if not stripped:
                if self._lead > cap:
                    raise Undecodable("request too large")
                return False
            if self._lead >= cap:
                raise Undecodable("request too large")
            data = stripped
            first = data[0]
            if first in b"[{":
                self._kind = _CONTAINER
            elif first == 0x22:  # '"'
                self._kind = _STRING
            elif first in _SCALAR_START:
                self._kind = _SCALAR
            else:
                raise Undecodable("the request does not start a JSON value")
        room = cap - self._lead - self._size
        if len(data) > room:
            data = data[:room]
        self._size += len(data)
        if self._kind == _SCALAR:
            self._buf += data
            complete = self._scalar_end()
        else:
            self._decode_utf8(data, final=False)  # decoded from UTF-8 as it arrives
            if first_chunk and self._kind == _STRING:
                self._in_string = True
                data = data[1:]  # the opening quote
            self._scan(data)
            if self._depth > MAX_DEPTH:
                raise Undecodable("invalid JSON: exceeded max depth")
            complete = not self._in_string and self._depth <= 0
        if complete:
            return True
        if self._lead + self._size >= cap:
            # The cap is reached: as with Go's io.LimitReader, the stream ends here.
            self._oversized = True
            return True
        return False

    def _decode_utf8(self, chunk: bytes, *, final: bool) -> None:
        """Decode *chunk* onto the text; a character it cuts in two waits for the next."""
        data = self._undecoded + chunk if self._undecoded else chunk
        text, used = codecs.utf_8_decode(data, GO_REPLACE, final)
        self._undecoded = data[used:]
        self._parts.append(text)

    def _scan(self, chunk: bytes) -> None:
        """Advance the bracket depth and string state over *chunk*, in whole-chunk passes.

        Inside a string, an escaped backslash or quote is dropped first (pairs
        left to right, as the escapes read); what is left is reduced to quotes
        and brackets; adjacent quotes go (an empty string, or two strings with
        nothing structural between them); any quotes left delimit strings with
        brackets inside, split out. Brackets outside strings are then counted.
        """
        in_string = self._in_string
        if self._escape and in_string and chunk:
            chunk = chunk[1:]  # the byte a backslash at the end of the last chunk escaped
        self._escape = False
        if b"\\" in chunk:
            trailing = len(chunk) - len(chunk.rstrip(b"\\"))
            if trailing % 2:
                chunk = chunk[:-1]
                self._escape = True
            chunk = chunk.replace(b"\\\\", b"").replace(b'\\"', b"")
        if self._kind == _CONTAINER:
            # The chunk's skeleton: brackets, quotes, separators and number shapes only
            # (digits as 0, exponents as e, signs as +), in one pass; a request of
            # strings has a small one, and every later pass runs over it.
            skeleton = chunk.translate(_SKELETON, _NOT_SKELETON)
            if not self._careful:
                if len(skeleton) >= _TAIL and b"0" not in skeleton:
                    self._tail = skeleton[-_TAIL:]  # no digit, no number: nothing to look for
                else:
                    joined = self._tail + skeleton
                    self._careful = _may_overflow(joined)
                    self._tail = joined[-_TAIL:]
            reduced = skeleton.translate(None, _NOT_STRUCTURAL)
        else:
            reduced = chunk.translate(None, _NOT_STRUCTURAL)
        if in_string:
            reduced = b'"' + reduced
        if b'"' in reduced:
            reduced = reduced.replace(b'""', b"")
            if b'"' in reduced:
                parts = reduced.split(b'"')
                in_string = len(parts) % 2 == 0
                reduced = b"".join(parts[::2])
            else:
                in_string = False
        else:
            in_string = False
        self._in_string = in_string
        if self._kind == _CONTAINER:
            self._depth += (
                reduced.count(b"[")
                + reduced.count(b"{")
                - reduced.count(b"]")
                - reduced.count(b"}")
            )
            if self._open is not None:
                self._match(reduced)

    def _match(self, brackets: bytes) -> None:
        """Pair *brackets* with the ones still open, so that ``[}`` is refused as it arrives.

        Matched neighbours are removed a few passes over (each in C); what is left
        is closes, then opens, unless two brackets mismatch. Nesting too deep to
        unwind in a few passes turns the check off (the decoder refuses a mismatch).
        """
        for _ in range(_MATCH_PASSES):
            shorter = brackets.replace(b"[]", b"").replace(b"{}", b"")
            if len(shorter) == len(brackets):
                break
            brackets = shorter
        else:
            self._open = None
            return
        opens = brackets.lstrip(b"]}")
        closes = len(brackets) - len(opens)
        if b"]" in opens or b"}" in opens:
            raise Undecodable("invalid JSON: mismatched brackets")
        open_ = self._open
        assert open_ is not None
        matched = min(closes, len(open_))
        if matched:
            expected = open_[len(open_) - matched :][::-1].translate(_CLOSE_OF)
            if brackets[:matched] != expected:
                raise Undecodable("invalid JSON: mismatched brackets")
        if matched and closes >= len(open_):
            self._open = b""  # the value closed: what follows is not read as part of it
        else:
            self._open = open_[: len(open_) - matched] + opens

    def _scalar_end(self) -> bool:
        buf = self._buf
        size = len(buf)
        literal = _LITERALS.get(buf[0])
        if literal is not None:  # complete once its letters are in: decoding checks them
            return size >= len(literal) or not literal.startswith(bytes(buf))
        end = _NUMBER.match(buf, self._pos).end()  # type: ignore[union-attr]  # * always matches
        self._pos = end
        return end < size  # a number needs a delimiter (or the end)

    def feed_eof(self) -> None:
        """The stream ended: what arrived is all there is.

        Raises:
            Undecodable: nothing arrived.
        """
        if not self._size:
            raise Undecodable("empty request")

    def decoding(self) -> Generator[None, None, Any]:
        """Decode what arrived, in slices (see the module's `decoding`); the value.

        Raises:
            Undecodable: not one valid value (``request too large`` if the cap
                cut it, ``the request ends before its value does`` if it stopped early).
        """
        if self._value is not NOTHING:
            return self._value
        pairs = self._pairs
        try:
            if self._kind == _SCALAR:
                # A bare number or literal: its token, all of it (``1.x`` is no ``1``).
                literal = _LITERALS.get(self._buf[0])
                end = len(self._buf) if literal is None else len(literal)
                if literal is None and not self._oversized:
                    end = _NUMBER.match(self._buf).end()  # type: ignore[union-attr]
                return decode_value(self._buf[:end])
            self._decode_utf8(b"", final=True)
            text = "".join(self._parts)
            self._parts = []
            value, _ = yield from _decoding(text, pairs=pairs, careful=self._careful, escapes=None)
        except Undecodable:
            if self._oversized:
                raise Undecodable("request too large") from None
            if (self._kind == _CONTAINER and self._depth > 0) or self._in_string:
                raise Undecodable("invalid JSON: the request ends before its value does") from None
            raise
        return value


#: What `whole` returns when the chunk is not a whole request it can decode at once.
NOTHING: Any = object()


def whole(data: bytes, pairs: bool = False) -> Any:
    """Decode a first chunk that is a whole request: a small object or array and a newline.

    One call of the careful C decoder, for the common case (a client writes
    its request as one line, and it arrives in one read).

    Returns:
        The value, or `NOTHING` when *data* is not that (larger, not ending
        in a newline, invalid UTF-8, invalid, nested deep): the framing path
        then takes it, and says what is wrong.
    """
    if len(data) > WHOLE or data[-1:] != b"\n" or data[:1] not in (b"{", b"["):
        return NOTHING
    try:
        text = data.decode()
        value, _ = (_CAREFUL_PAIRS if pairs else _CAREFUL)(text, 0)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError too
        return NOTHING
    if "\\" in text and has_surrogate_escape(text):
        value = _replace_surrogates(value)
    return value


# --- converting the parsed JSON into the daemon's payload type -------------------------

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
