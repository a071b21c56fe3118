"""Reading one request: framing in C-speed passes, and sliced decoding, as Go decodes.

The server frames a request as soon as one complete JSON value has arrived, as
Go's ``json.Decoder`` does: no trailing newline is needed. Framing never takes
a Python step per byte or per bracket: each received chunk is reduced to its
skeleton, then to its brackets outside strings, by a few whole-chunk passes in
C (``bytes.translate``, ``bytes.replace``, ``bytes.count``), which keeps the
nesting depth at every chunk boundary exactly, pairs brackets so that one of
the wrong kind is refused as it arrives, and notes whether a number a float64
may not hold can be in it. A chunk with no bracket and no backslash (the
middle of a request of strings) costs less: a few ``memchr`` searches, the
texts around its last quotes (which tell where its strings end), and, if it
has digits, one pass for the number check. A container is complete once its
brackets balance at the end of a read (a client's request always ends a
write); the value is then decoded once, from its first byte. The size cap
counts every byte from the start of the stream to the end of the value,
leading whitespace included, as Go's ``io.LimitReader`` does.

Decoding is `decoding`, a generator that does about `SLICE` characters of
work between two yields (or one batch of containers, of about 3 ms), so the
server runs a large request as a chain of short loop callbacks. It reads the
request's bytes as text a window at a time (UTF-8 decoded as the decoder
reaches them, never joined into one string), and decodes batches of a
container's elements with the C decoder, cutting at a separator it then
verifies (the batch must parse exactly up to the cut), and walks into an
element only when a batch fails: close to ``json.loads``' own cost, no step
that copies or touches the whole request, and no recursion, so nesting goes
as deep as Go's 10,000 levels.

Decoding follows Go's ``encoding/json``: bytes that are not UTF-8 become
U+FFFD, one per byte; a ``\\u`` escape of a lone surrogate becomes U+FFFD;
``NaN`` and ``Infinity`` are refused, and so is a number too large for a
float64 (``1e400``, an integer of 400 digits: Go decodes an untyped number
into a float64); nesting deeper than 10,000 levels is refused. What the value
becomes in the daemon's payload type is `._payload`'s.

No message raised here quotes the payload: messages name types and offsets.
"""

from __future__ import annotations

import codecs
import contextlib
import gc
import json
import re
import time
import typing
from collections.abc import Callable, Generator
from typing import Any, final

from ._wire import GO_REPLACE, has_surrogate_escape, last_wins, replace_surrogates

__all__ = [
    "MAX_DEPTH",
    "NOTHING",
    "SLICE",
    "WHOLE",
    "Pairs",
    "RequestReader",
    "Undecodable",
    "decode_value",
    "decoding",
    "finish",
    "whole",
]

#: Go's ``encoding/json`` refuses values nested deeper than this.
MAX_DEPTH = 10_000
#: About how many characters of decoding work `decoding` does between two yields.
SLICE = 32 * 1024
#: A first chunk up to this size that holds the whole request is decoded at once (`whole`).
WHOLE = 64 * 1024
# How many bytes decoding takes from the request at a time, at least (a window).
_WINDOW = 256 * 1024
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
_BIG_EXPONENT = re.compile(rb"e\+?000")  # one pass for e000 and e+000
# The escapes framing must see through (an escaped backslash or quote), and a \u escape
# of a surrogate (its only spelling: Go decodes a lone one as U+FFFD).
_QUOTE_ESCAPES = re.compile(rb'\\[\\"]')
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_LONG_DIGITS = b"0" * 200
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

    __slots__ = (
        "after_comma",
        "close",
        "inherit",
        "items",
        "key",
        "mapped",
        "pairs",
        "probe_until",
        "sep",
        "sep_at",
        "tracked",
    )

    def __init__(self, opener: str, pairs: bool) -> None:
        self.close = "]" if opener == "[" else "}"
        self.pairs = pairs
        self.items: Any = [] if opener == "[" else Pairs() if pairs else {}
        self.key: str | None = None  # the member whose value is being decoded
        self.after_comma = False  # a close right after a comma is invalid
        self.probe_until = -1  # up to this offset in the request, elements go one at a time
        self.inherit = False  # whether an element walked into before then goes one at a time too
        self.mapped = False  # whether items (a long list) was given its own mapping
        self.sep = ""  # the text between two elements seen last, if structural
        self.sep_at = 0  # where the comma is in sep
        self.tracked: bool | None = None  # whether its elements are containers gc follows

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
        items = self.items
        if isinstance(items, dict):
            items.update(batch)
            return
        if len(items) >= _MAP_AT and not self.mapped:
            self.mapped = True
            with contextlib.suppress(_Room):
                items.extend(_Mapping())
        items.extend(batch)


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
    careful = _may_overflow(data.translate(_NUMBER_SHAPE))
    surrogates = b"\\" in data and _SURROGATE_ESCAPE.search(data) is not None
    return (
        yield from _decoding(_Source([data]), pairs=pairs, careful=careful, surrogates=surrogates)
    )


def _may_overflow(shape: bytes | bytearray) -> bool:
    """Whether a number-shaped text (see `_NUMBER_SHAPE`) holds a number a float64 may not.

    Each search is a C pass; the exponent shapes are only looked for where an
    exponent shows at all (a search for ``e000`` in a text of digits is slow).
    """
    if b"e" in shape and _BIG_EXPONENT.search(shape):
        return True
    return _LONG_DIGITS in shape


# Bytes that may stand outside a string in valid JSON, brackets aside: whitespace,
# separators, numbers, and the letters of true, false and null. A text between two
# quotes with any other byte is inside a string.
_OUTSIDE = b" \t\n\r,:+-.0123456789eEtrufalsn"
# Each looked for with one memchr: cheaper than one pass that maps every byte.
_BRACKETS = (b"[", b"]", b"{", b"}")
_DIGITS = tuple(bytes([b]) for b in b"1023456789")
# How many quotes back from a chunk's end `_open_at_end` looks.
_QUOTES_BACK = 16


def _open_at_end(chunk: bytes, open_at_start: bool) -> bool | None:
    """Whether a string is open at the end of *chunk* (no backslash or bracket in it).

    Without backslashes every quote delimits a string, so the texts between
    quotes alternate between inside and outside: one with a byte that valid
    JSON has only inside strings (see `_OUTSIDE`) places every quote after it,
    and the chunk's start places them all. ``None`` when the last few quotes
    cannot tell (strings of separators and letters of literals only).

    Only valid JSON is placed exactly; in text that is not, the placing may be
    wrong, and the decoder refuses the request whatever was framed.
    """
    end = len(chunk)
    for back in range(_QUOTES_BACK):
        quote = chunk.rfind(b'"', 0, end)
        if quote < 0:  # the chunk's start: inside a string as it was; *back* quotes since
            return open_at_start != (back % 2 == 1)
        if chunk[quote + 1 : end].strip(_OUTSIDE):
            return back % 2 == 0  # that text is inside: so is the end's, an even count on
        end = quote
    return None


@final
class _Source:
    """A request's bytes, handed to the decoder as text a window at a time.

    Each window is decoded from UTF-8 when the decoder reaches it (a character
    cut in two by a window's end waits for the next), and the bytes it came
    from are let go: the request is never joined into one string, so no step
    of decoding copies or touches it all.
    """

    __slots__ = ("_chunks", "_next", "_offset", "_undecoded")

    def __init__(self, chunks: list[Any]) -> None:
        self._chunks = chunks  # bytes-like; taken over (emptied as they are read)
        self._next = 0  # the chunk the next window starts in
        self._offset = 0  # where in it
        self._undecoded = b""  # a character's first bytes, cut off by a window's end

    @property
    def done(self) -> bool:
        """Whether every byte has been read."""
        return self._next >= len(self._chunks)

    def read(self, want: int) -> str:
        """About *want* bytes more as text (from half to twice that: whole chunks as they
        came, when they are of that size, so that no bytes are joined; less only at the
        end, and ``""`` after it)."""
        chunks = self._chunks
        taken: list[Any] = [self._undecoded] if self._undecoded else []
        got = 0
        while got < want // 2 + 1 and self._next < len(chunks):
            chunk = chunks[self._next]
            start = self._offset
            end = start + want - got
            if end + want < len(chunk):  # a large chunk (a request in one piece) goes by windows
                taken.append(memoryview(chunk)[start:end])
                self._offset = end
            else:
                taken.append(chunk if not start else memoryview(chunk)[start:])
                end = len(chunk)
                chunks[self._next] = b""  # let it go: its bytes are in the window now
                self._next += 1
                self._offset = 0
            got += end - start
        data = taken[0] if len(taken) == 1 else b"".join(taken)
        text, used = codecs.utf_8_decode(data, GO_REPLACE, self.done)
        self._undecoded = bytes(data[used:])
        return text


def _decoding(
    source: _Source, *, pairs: bool, careful: bool, surrogates: bool
) -> Generator[None, None, tuple[Any, int]]:
    """`decoding`, of the bytes *source* holds (*surrogates*: a surrogate escape may be in them).

    The decoder works on a window of the text: ``text[pos:]`` is where it is,
    ``base + pos`` that place in the whole request. Before each step the window
    is topped up to hold what a batch or a probe may look at (``ahead``
    characters), or all there is. A string that runs past the window's end is
    retried in one that reaches a quote further on; anything else the end may
    have cut (a number, a literal, an escape) in one twice as long; whitespace
    up to the end is let go. So each character is decoded about once, and
    copied into a window about twice.
    """
    decode = _DECODERS[(pairs, careful)].raw_decode
    slice_ = SLICE
    span = slice_  # the characters a batch takes, about, by what the last one cost
    ahead = 2 * span + _PROBE
    text = source.read(max(_WINDOW, ahead))
    final = source.done
    size = len(text)
    base = 0
    stack: list[_Frame] = []
    pos = _skip(text, 0)
    if final:
        if pos >= size:
            raise Undecodable("empty request")
        if size - pos <= slice_:  # small: one call of the C decoder, unless it nests too deep
            try:
                value, end = decode(text, pos)
            except RecursionError:
                pass
            except ValueError as exc:
                raise _invalid(exc) from None
            else:
                return (yield from _done(value, end, surrogates))
    mode = _VALUE
    work = 0
    need = ahead  # what the window must hold from pos on, unless it holds all there is
    to_quote = False  # a string runs past the window: read on to a quote that may end it
    closed: Any = None
    while True:
        work += _STEP  # a step of the walk itself (a bracket, a key, an element taken alone)
        if work >= slice_:
            work = 0
            yield
        if size - pos < need and not final:
            parts = [text[pos:]] if pos < size else []
            new = source.read(max(need, _WINDOW, 4 * ahead))
            parts.append(new)
            read = len(new)
            while to_quote and '"' not in new and not source.done:
                new = source.read(_WINDOW)
                parts.append(new)
                read += len(new)
            text = "".join(parts) if len(parts) > 1 else new
            base += pos
            pos = 0
            size = len(text)
            final = source.done
            work += read >> 3  # decoding UTF-8 and copying: a fraction of parsing it
            need = ahead
            to_quote = False
            continue
        if mode == _VALUE:  # at the start of a value: the whole request, or an element
            char = text[pos : pos + 1]
            if char in ("[", "{") and char:
                if stack and len(stack) <= _C_DEPTH:
                    # An element on its own: a small one decodes whole, within a probe.
                    try:
                        value, end = decode(text[pos : pos + _PROBE])
                    except (ValueError, RecursionError):
                        work += _PROBE  # large, deep or faulty: walk into it
                    else:
                        stack[-1].add(value)
                        work += end
                        pos += end
                        mode = _AFTER
                        continue
                if len(stack) >= MAX_DEPTH:
                    raise Undecodable("invalid JSON: exceeded max depth")
                frame = _Frame(char, pairs)
                if stack and stack[-1].inherit:
                    # Where the parent's batch failed inside, so would the child's: walk on.
                    frame.probe_until = stack[-1].probe_until
                    frame.inherit = True
                stack.append(frame)
                pos += 1
                mode = _ELEMENT
                continue
            try:
                value, end = decode(text, pos)
            except (ValueError, RecursionError) as exc:
                if not final and _cut_short(exc, size):
                    work += size - pos
                    need = max(2 * (size - pos), ahead)
                    to_quote = char == '"'
                    continue  # it may run on past the window: retry in a longer one
                raise _invalid(exc, base) from None
            if end > size - _NUMBER_TAIL and not final and char in _NUMBER_START:
                need = max(2 * (size - pos), ahead)
                continue  # a number the window's end may have cut (12|34, 1.|5)
            if not stack:
                return (yield from _done(value, base + end, surrogates))
            stack[-1].add(value)
            work += end - pos
            pos = end
            mode = _AFTER
            continue
        frame = stack[-1]
        at = _skip(text, pos)
        if at >= size:
            if not final:
                pos = at  # whitespace to the window's end: let it go
                continue
            raise Undecodable(
                f"invalid JSON: the request ends before its value does at offset {base + at}"
            )
        char = text[at]
        if mode == _AFTER:  # after an element: a comma or the close
            if char == ",":
                after = _skip(text, at + 1)
                if not frame.sep and after < size:
                    frame.learn_separator(text, at, after)
                frame.after_comma = True
                pos = after
                mode = _ELEMENT
                continue
            if char != frame.close:
                raise Undecodable(f"invalid JSON: Expecting ',' delimiter at offset {base + at}")
            pos = at
        elif char == frame.close:  # _ELEMENT, at the close
            if frame.after_comma:
                raise Undecodable(f"invalid JSON: Expecting value at offset {base + at}")
            pos = at
        else:  # _ELEMENT: one, or a batch of them
            pos = at
            if frame.close == "}" and char != '"':
                raise Undecodable(
                    "invalid JSON: Expecting property name enclosed in double quotes "
                    f"at offset {base + pos}"
                )
            if base + pos > frame.probe_until and len(stack) <= _C_DEPTH:
                while True:
                    began = time.perf_counter()
                    after, closes, batch = _batch(text, pos, frame, decode, base=base, span=span)
                    if batch:
                        work += after - pos
                        if frame.tracked is None:
                            frame.tracked = gc.is_tracked(_sample(batch))
                        span = _next_span(
                            span, after - pos, len(batch), time.perf_counter() - began, frame
                        )
                        need = ahead = 2 * span + _PROBE
                    else:
                        work += span
                    if after < 0 or closes:
                        break
                    pos = after
                    frame.after_comma = True
                    # Straight on to the next batch while this step has work left, the
                    # window holds a batch ahead, and an element (no close) starts there.
                    if work >= slice_ or size - pos < need:
                        break
                    at = _skip(text, pos)
                    char = text[at : at + 1]
                    if not char or char == frame.close or (frame.close == "}" and char != '"'):
                        break
                    pos = at
                if after >= 0:
                    if not closes:
                        continue  # the main loop goes on after the batch's last comma
                    char = frame.close  # the batch ran to the container's close
                    pos = after - 1
            if char != frame.close:
                if frame.close == "}":
                    try:
                        key, end = decode(text, pos)
                    except (ValueError, RecursionError) as exc:
                        if not final and _cut_short(exc, size):
                            work += size - pos
                            need = max(2 * (size - pos), ahead)
                            to_quote = True
                            continue
                        raise _invalid(exc, base) from None
                    end = _skip(text, end)
                    colon = text[end : end + 1] == ":"
                    after = _skip(text, end + 1) if colon else end
                    if after >= size and not final:
                        need = max(2 * (size - pos), ahead)
                        continue
                    if not colon:
                        raise Undecodable(
                            f"invalid JSON: Expecting ':' delimiter at offset {base + end}"
                        )
                    frame.key = key
                    work += after - pos
                    pos = after
                mode = _VALUE
                continue
        # The close of stack[-1] is at pos.
        closed = stack.pop().items
        pos += 1
        if not stack:
            return (yield from _done(closed, base + pos, surrogates))
        stack[-1].add(closed)
        mode = _AFTER


_VALUE, _ELEMENT, _AFTER = 0, 1, 2
# What one step of the walk counts as, in characters decoded (about as long in time).
_STEP = 64
# A batch of containers the collector follows should take about this long, in seconds
# (up to this many times SLICE characters); one of plain elements should make about
# this many (up to SLICE characters); either takes a quarter of SLICE at least.
_BATCH_TIME = 0.003
_BATCH_ITEMS = 4096
_SPAN_MAX = 4
# A list this long is given its own mapping before it grows on (see _Mapping).
_MAP_AT = 1 << 16


class _Room(Exception):
    """Ends `_Mapping` at once: ``list.extend`` has made the room it hinted."""


@final
class _Mapping:
    """An iterable that hints 40 MiB of items and has none: extending a list by it moves
    the list into its own memory mapping, where it then grows without being copied.

    CPython's ``list.extend`` makes room for the length an iterable hints
    (PEP 424) before taking its items, and keeps it if the iterable raises.
    Room beyond what the C allocator serves from its heap (at most 32 MiB in
    glibc) is a mapping of its own; the next ``extend`` gives back what is not
    needed, and growing after that remaps the pages in place. A list of millions
    of decoded elements otherwise grows by copies into fresh memory, the last of
    them tens of megabytes in one loop callback: 5 ms on an idle machine, over
    20 ms on a busy one, all page faults. Elsewhere this is only a hint.
    """

    def __iter__(self) -> _Mapping:
        return self

    def __length_hint__(self) -> int:
        return (40 << 20) // 8

    def __next__(self) -> Any:
        raise _Room


# A number ending this close to the window's end may go on past it.
_NUMBER_TAIL = 4
_NUMBER_START = frozenset("-0123456789")


def _skip(text: str, pos: int) -> int:
    """Where the JSON whitespace at *pos* ends (one comparison when there is none)."""
    if text[pos : pos + 1] > " ":
        return pos
    return _SKIP.match(text, pos).end()  # type: ignore[union-attr]  # * always matches


def _cut_short(exc: BaseException, size: int) -> bool:
    """Whether a decoder failure may only be the window's end cutting a value short.

    An unterminated string (its start is the offset), or any failure within a
    few characters of the end (``tru``, ``-``, ``"\\u12``): a longer window
    may hold the rest. Anything else fails the same however long the window.
    """
    if not isinstance(exc, json.JSONDecodeError):
        return False
    return exc.msg.startswith("Unterminated string") or exc.pos > size - _SCALAR_TAIL


# A failure this close to the window's end may be a literal or escape it cut short.
_SCALAR_TAIL = 8


def _batch(
    text: str,
    pos: int,
    frame: _Frame,
    decode: Callable[..., tuple[Any, int]],
    *,
    base: int,
    span: int,
) -> tuple[int, bool, Any]:
    """Decode elements from *pos* up to a separator about *span* on, verified by the decoder.

    *base* is where *text* starts in the request (``probe_until`` counts from there).

    Returns:
        ``(offset after the batch's last comma, False, batch)``, or ``(offset
        after the container's close, True, batch)``, or ``(-1, False, None)``
        when no batch fits (the caller then takes elements one at a time, up to
        ``frame.probe_until``). *batch*: the elements decoded, merged into the frame.
    """
    size = len(text)
    cut = -1
    if frame.sep:
        cut = text.find(frame.sep, pos + span)
        if cut >= 0:
            cut += frame.sep_at
    if cut < 0:
        cut = text.find(",", pos + span)
    stop = cut if cut >= 0 else min(size, pos + 2 * span)
    opener = "[" if frame.close == "]" else "{"
    piece = "".join((opener, text[pos:stop], frame.close))
    try:
        batch, end = decode(piece)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, json.JSONDecodeError) and exc.pos >= len(piece) - 1:
            # Failing at the piece's end, the cut fell inside an element: take the next
            # one on its own (a large one is walked into and batched inside), which
            # also shows the separator between elements to cut at from then on.
            frame.probe_until = base + pos
            frame.inherit = False
        else:  # something in the piece is too deep or faulty: one at a time, inside too
            frame.probe_until = base + stop
            frame.inherit = True
        return -1, False, None
    if end < len(piece):
        # The container closed inside the piece: piece[end - 1] is its close.
        frame.merge(batch)
        return pos + end - 1, True, batch
    if cut >= 0:
        frame.merge(batch)
        return cut + 1, False, batch
    frame.probe_until = base + stop  # only the close we added ended it: not a batch
    frame.inherit = False
    return -1, False, None


def _sample(batch: Any) -> Any:
    """An element of a non-empty batch (a member's value, for an object)."""
    if isinstance(batch, dict):
        return next(iter(batch.values()))
    return batch[-1][1] if isinstance(batch, Pairs) else batch[-1]


def _next_span(span: int, chars: int, count: int, took: float, frame: _Frame) -> int:
    """How many characters the next batch should take, from what the last one cost.

    Its elements are then merged into the container (a reference taken and one
    given back, each): plain ones (strings, numbers, empty or flat objects, which
    the garbage collector does not follow) are still in the processor's cache if
    a batch makes about `_BATCH_ITEMS` of them; containers the collector follows
    go in batches of about `_BATCH_TIME`, as few as that allows, since every
    batch of them sets off a collection of the young generation.
    """
    if frame.tracked:  # (as the container's first batch showed)
        if took < _BATCH_TIME / 2:
            span = min(2 * span, _SPAN_MAX * SLICE)
        elif took > 2 * _BATCH_TIME:
            span //= 2
    else:
        span = min(chars * _BATCH_ITEMS // count, SLICE)
    return max(SLICE // 4, span, 1)


def _done(value: Any, end: int, surrogates: bool) -> Generator[None, None, tuple[Any, int]]:
    if surrogates:
        value = yield from _replacing(value)
    return value, end


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
    return finish(_replacing(value))


# Items `_replacing` looks at between two yields.
_REPLACE_STEP = 4096
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _replacing(value: Any) -> Generator[None, None, Any]:
    """`_replace_surrogates`, yielding every `_REPLACE_STEP` items or so.

    A large container is taken a range of items at a time, so no step looks at
    all of it (a dict's keys are searched joined, and the dict is rebuilt only
    when one of them holds a surrogate).
    """
    root: list[Any] = [value]
    # (container, first, last, member, keys): container's items first..last are left.
    # member: a Pairs, whose items are (name, value) tuples; keys: a dict's, in order.
    stack: list[tuple[Any, int, int, bool, list[str] | None]] = [(root, 0, 1, False, None)]
    work = 0
    while stack:
        if work >= _REPLACE_STEP:
            work = 0
            yield
        container, first, last, member, keys = stack.pop()
        end = min(last, first + _REPLACE_STEP)
        if end < last:
            stack.append((container, end, last, member, keys))
        work += end - first
        for index in range(first, end):
            key: Any = index if keys is None else keys[index]
            if member:
                name, item = container[key]
                fixed_name = replace_surrogates(name)
            else:
                item = container[key]
            fixed = item
            if isinstance(item, str):
                fixed = replace_surrogates(item)
            elif isinstance(item, list):  # Pairs too
                stack.append((item, 0, len(item), isinstance(item, Pairs), None))
            elif isinstance(item, dict):
                if _LONE_SURROGATE.search("".join(item)):
                    fixed = last_wins([(replace_surrogates(k), v) for k, v in item.items()])
                stack.append((fixed, 0, len(fixed), False, list(fixed)))
            if member:
                if fixed is not item or fixed_name is not name:
                    container[key] = (fixed_name, fixed)
            elif fixed is not item:
                container[key] = fixed
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
        "_chunks",
        "_depth",
        "_end",
        "_escape",
        "_in_string",
        "_kind",
        "_lead",
        "_max_size",
        "_open",
        "_oversized",
        "_pairs",
        "_pos",
        "_size",
        "_surrogates",
        "_tail",
        "_value",
    )

    def __init__(self, max_size: int, *, pairs: bool = False) -> None:
        self._max_size = max_size
        self._pairs = pairs
        self._value: Any = NOTHING  # a whole first chunk, decoded at once
        self._chunks: list[bytes] = []  # the value's bytes, as they came (decoded from UTF-8 later)
        self._careful = False  # a number a float64 may not hold may be in it
        self._surrogates = False  # a \\u escape of a surrogate may be in it (to replace)
        self._end = b""  # the last bytes of the last chunk, for an escape cut in two
        self._tail = b""  # the last bytes of the last chunk, for a pattern cut in two
        self._lead = 0  # whitespace before the value: counted, not kept
        self._size = 0  # the value's bytes so far
        self._buf = bytearray()  # a bare number's or literal's bytes (others go to _chunks)
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
            self._chunks.append(data)
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

    def _scan(self, chunk: bytes) -> None:
        """Advance the bracket depth and string state over *chunk*, in whole-chunk passes.

        Inside a string, an escaped backslash or quote is dropped first (pairs
        left to right, as the escapes read; other escapes change nothing here).
        A chunk of a container with no bracket then leaves the depth as it was,
        and only the string state needs working out: from what surrounds its
        last quotes (`_open_at_end`), with a few searches, when that tells; the
        number check then maps its bytes only if it has a digit. Otherwise the
        chunk is reduced to quotes and brackets; adjacent quotes go (an empty
        string, or two strings with nothing structural between them); any quotes
        left delimit strings with brackets inside, split out. The brackets left
        are paired with the ones still open (`_match`).
        """
        if not self._surrogates:
            # A \u escape of a surrogate, for the decoder to replace: one straddling the
            # last chunk's end is looked for in that chunk's last bytes and this one's first.
            if b"\\" in chunk or b"\\" in self._end:
                self._surrogates = bool(
                    _SURROGATE_ESCAPE.search(chunk)
                    or _SURROGATE_ESCAPE.search(self._end + chunk[:5])
                )
            self._end = chunk[-5:]
        in_string = self._in_string
        if self._escape and in_string and chunk:
            chunk = chunk[1:]  # the byte a backslash at the end of the last chunk escaped
        self._escape = False
        if b"\\" in chunk:
            trailing = len(chunk) - len(chunk.rstrip(b"\\"))
            if trailing % 2:
                chunk = chunk[:-1]
                self._escape = True
            if _QUOTE_ESCAPES.search(chunk):  # (a \n, say, changes nothing framing sees)
                chunk = chunk.replace(b"\\\\", b"").replace(b'\\"', b"")
        if self._kind == _CONTAINER and not any(b in chunk for b in _BRACKETS):
            open_at_end = _open_at_end(chunk, in_string)
            if open_at_end is not None:
                self._in_string = open_at_end
                if not self._careful:
                    if any(b in chunk for b in _DIGITS):
                        joined = self._tail + chunk.translate(_NUMBER_SHAPE)
                        self._careful = _may_overflow(joined)
                    else:  # a number the next chunk ends may start here (1e|400)
                        joined = self._tail + chunk[-_TAIL:].translate(_NUMBER_SHAPE)
                    self._tail = joined[-_TAIL:]
                return
        if self._kind == _STRING:
            # Escapes gone, the first quote closes the string: the value is complete.
            self._in_string = b'"' not in chunk
            return
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
        if self._open is not None:
            self._match(reduced)
        if self._open is not None:
            self._depth = len(self._open)  # the brackets still open (none: the value closed)
        else:
            self._depth += (
                reduced.count(b"[")
                + reduced.count(b"{")
                - reduced.count(b"]")
                - reduced.count(b"}")
            )

    def _match(self, brackets: bytes) -> None:
        """Pair *brackets* with the ones still open, so that ``[}`` is refused as it arrives.

        Matched neighbours are removed a few passes over (each in C); what is left
        is closes, then opens, unless two brackets mismatch. Nesting too deep to
        unwind in a few passes, or in passes over three times the chunk's brackets
        in all, turns the check off (the decoder refuses a mismatch).
        """
        budget = 3 * len(brackets)
        for _ in range(_MATCH_PASSES):
            budget -= len(brackets)
            shorter = brackets.replace(b"[]", b"").replace(b"{}", b"")
            if len(shorter) == len(brackets):
                break
            brackets = shorter
            if budget < len(brackets):
                self._open = None
                return
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
            source = _Source(self._chunks)
            self._chunks = []
            value, _ = yield from _decoding(
                source, pairs=pairs, careful=self._careful, surrogates=self._surrogates
            )
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
