"""Request framing and payload decoding, as a Go daemon reads a request."""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sched_trigger_testkit import json_values

import sched_trigger._request as request
from sched_trigger._payload import dataclass_decoder
from sched_trigger._request import (
    RequestReader,
    Undecodable,
    decoding,
    finish,
)
from sched_trigger._wire import has_surrogate_escape

CAP = 1 << 20


def feed_all(
    chunks: list[bytes], *, cap: int = CAP, eof: bool = False, pairs: bool = False
) -> tuple[bool, Any]:
    """Feed *chunks* in order; decode the first complete value (or what came, at EOF)."""
    reader = RequestReader(cap, pairs=pairs)
    for chunk in chunks:
        if reader.feed(chunk):
            return True, finish(reader.decoding())
    if eof:
        reader.feed_eof()
        return True, finish(reader.decoding())
    return False, None


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]


@given(value=json_values, cuts=st.lists(st.integers(0, 10_000), max_size=8), nl=st.booleans())
def test_any_value_in_any_chunks_decodes_once_complete(
    value: Any, cuts: list[int], nl: bool
) -> None:
    """However a value is split, it decodes to json.loads' result once it is complete.

    A bare number needs a delimiter (or EOF) to be complete, as in Go.
    """
    data = json.dumps(value).encode() + (b"\n" if nl else b"")
    bare_number = isinstance(value, int | float) and not isinstance(value, bool)
    done, decoded = feed_all(split(data, cuts), eof=bare_number and not nl)
    if not done:
        # Without a newline, only EOF can complete the request: Go waits the same way.
        assert not nl
        done, decoded = feed_all(split(data, cuts), eof=True)
    assert done
    assert json.loads(data) == decoded


def test_no_newline_needed_and_trailing_bytes_ignored() -> None:
    """One complete value is enough; what follows it is not read as part of the request."""
    assert (True, {"a": 1}) == feed_all([b'  {"a"', b":1}"])
    assert (True, [1]) == feed_all([b"[1] garbage after"])
    assert (True, "s") == feed_all([b'"s"'])
    assert (True, 12) == feed_all([b"1", b"2 "])
    assert (False, None) == feed_all([b"12"])
    assert (True, 12) == feed_all([b"12"], eof=True)


@pytest.mark.parametrize(
    "chunks",
    [
        [b"hello\n"],
        [b"}"],
        [b'{"a": nope}'],
        [b"NaN\n"],
        [b'{"a": Infinity}'],
        [b"[1,]\n"],
        [b"1.x\n"],
    ],
)
def test_garbage_is_undecodable_at_once(chunks: list[bytes]) -> None:
    """Garbage is refused as soon as it shows, without waiting for EOF."""
    with pytest.raises(Undecodable):
        feed_all(chunks)


@pytest.mark.parametrize(
    "chunks", [[b'{"a": "xy'], [b'{"a": 1.'], [b"tru"], [b"[1,"], [b'"\\u12'], [b"   "]]
)
def test_truncated_requests_wait_then_fail_at_eof(chunks: list[bytes]) -> None:
    """A valid prefix waits for more; at EOF it is undecodable."""
    assert (False, None) == feed_all(chunks)
    with pytest.raises(Undecodable):
        feed_all(chunks, eof=True)


def test_invalid_utf8_becomes_one_replacement_per_byte() -> None:
    """Undecodable bytes inside strings become U+FFFD, one per byte, as Go decodes them."""
    assert (True, "a\ufffd\ufffdA\ufffd") == feed_all([b'"a\xe2\x82A\xff"'])
    # A character split across chunks is not mistaken for garbage.
    assert (True, "é") == feed_all([b'"\xc3', b'\xa9"'])


@given(
    text=st.text(st.characters(codec="utf-8", exclude_categories=["Cc"]), max_size=12),
    junk=st.binary(max_size=4).map(lambda raw: bytes(b | 0x80 for b in raw)),
    at=st.integers(0, 100),
    cut=st.integers(1, 200),
)
def test_utf8_cut_by_a_read_decodes_as_in_one_read(
    text: str, junk: bytes, at: int, cut: int
) -> None:
    """A character cut in two by the end of a read is decoded whole, and bytes that are no
    UTF-8 (wherever the cut falls) become the same U+FFFDs as in one read."""
    body = text.encode()
    at %= len(body) + 1
    raw = body[:at] + junk + body[at:]  # junk: bytes of 0x80 and up, never UTF-8 alone
    data = b'["' + raw.replace(b"\\", b"").replace(b'"', b"") + b'"]'
    cut %= len(data)
    whole_read = feed_all([data, b"\n"])
    assert whole_read == feed_all([data[:cut], data[cut:], b"\n"])


def test_size_cap_just_under_and_over() -> None:
    """A value of exactly the cap is accepted (trailing bytes aside); one byte more is not."""
    body = b'"' + b"x" * 98 + b'"'
    assert 100 == len(body)
    assert (True, "x" * 98) == feed_all([body[:50], body[50:], b"\n"], cap=100)
    assert (True, "x" * 98) == feed_all([body + b"\n"], cap=100)
    with pytest.raises(Undecodable, match="too large"):
        feed_all([b'"' + b"x" * 99 + b'"'], cap=100)
    with pytest.raises(Undecodable, match="too large"):
        feed_all([b'"' + b"x" * 200], cap=100)


@dataclass
class Inner:
    """A nested payload part."""

    name: str = "n"


@dataclass
class Payload:
    """A payload the way a Go struct with defaults would look."""

    repos: list[str] = field(default_factory=list)
    count: int = 0
    ratio: float = 1.0
    flag: bool = False
    inner: Inner = field(default_factory=Inner)
    env: dict[str, str] = field(default_factory=dict)
    maybe: int | None = None
    anything: Any = None
    note: str = ""


def test_dataclass_payload_decoding_is_go_lenient() -> None:
    """Unknown keys are ignored, missing keys and nulls take defaults, names match any case."""
    convert = dataclass_decoder(Payload)
    assert Payload() == convert({})
    assert Payload() == convert(None)
    assert Payload(["a"], 2, 3.0, True, Inner("x"), {"K": "v"}, 5, [1]) == convert(
        {
            "REPOS": ["a"],
            "count": 2,
            "ratio": 3,
            "flag": True,
            "inner": {"name": "x", "new": 1},
            "env": {"K": "v"},
            "maybe": 5,
            "anything": [1],
            "unknown": "ignored",
            "repos_extra": 1,
        }
    )
    assert Payload(count=0) == convert({"count": None})


@pytest.mark.parametrize(
    "value",
    [
        [],
        5,
        {"repos": "a"},
        {"count": "1"},
        {"count": 1.5},
        {"flag": 1},
        {"count": True},
        {"inner": []},
        {"env": {"K": 1}},
        {"repos": [1]},
    ],
)
def test_dataclass_payload_type_mismatch_is_undecodable(value: object) -> None:
    """A value of the wrong JSON type is refused, as Go's Unmarshal refuses it."""
    with pytest.raises(Undecodable):
        dataclass_decoder(Payload)(value)


def test_required_field_missing_is_undecodable() -> None:
    """A field without a default that the request lacks cannot be built."""

    @dataclass
    class Strict:
        name: str

    with pytest.raises(Undecodable, match="cannot build Strict"):
        dataclass_decoder(Strict)({})
    assert Strict("x") == dataclass_decoder(Strict)({"name": "x"})


def test_payload_type_must_be_a_dataclass() -> None:
    """A payload_type that is not a dataclass type is a TypeError up front."""
    with pytest.raises(TypeError, match="dataclass"):
        dataclass_decoder(dict)
    with pytest.raises(TypeError, match="dataclass"):
        dataclass_decoder(Payload())  # type: ignore[arg-type]


# --- linear-time framing -----------------------------------------------------------------


@dataclass
class _CountingDecoder:
    """Stands in for one of the module's JSON decoders and counts the characters it sees."""

    real: Any
    seen: int = 0

    def raw_decode(self, text: str, index: int = 0) -> tuple[Any, int]:
        self.seen += len(text) - index
        return self.real.raw_decode(text, index)  # type: ignore[no-any-return]


def test_a_request_in_many_chunks_is_decoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks that each end like a value might (a quote, a newline) do not make the reader
    re-parse what it already has: the decoder sees about each byte once, not once per chunk."""
    counters = {key: _CountingDecoder(real) for key, real in request._DECODERS.items()}
    monkeypatch.setattr(request, "_DECODERS", counters)
    element = b'"' + b"x" * 60 + b'",\n'
    chunks = [b"["] + [element] * 2000 + [b'"last"]\n']
    size = sum(map(len, chunks))
    assert (True, ["x" * 60] * 2000 + ["last"]) == feed_all(chunks, cap=size)
    assert sum(c.seen for c in counters.values()) <= 2 * size


def test_leading_whitespace_counts_against_the_cap() -> None:
    """Every byte up to the end of the value counts, leading whitespace included (Go's
    LimitReader): a stream of spaces is refused as soon as it passes the cap."""
    value = b'"' + b"x" * 38 + b'"'
    assert (True, "x" * 38) == feed_all([b" " * 60, value], cap=100)
    with pytest.raises(Undecodable, match="too large"):
        feed_all([b" " * 61, value], cap=100)
    reader = RequestReader(100)
    assert not reader.feed(b" " * 100)
    with pytest.raises(Undecodable, match="too large"):
        reader.feed(b" ")


def test_a_number_cut_by_the_cap_ends_there_as_go_reads_it() -> None:
    """At the cap the stream ends, as a LimitReader ends it: a bare number is complete."""
    assert (True, 12345) == feed_all([b"  12345"], cap=7)
    assert (True, 12345) == feed_all([b"1234567"], cap=5)
    with pytest.raises(Undecodable, match="too large"):
        feed_all([b"[1, 2"], cap=5)


def test_nesting_beyond_go_max_depth_is_refused_at_once() -> None:
    """Go refuses nesting deeper than 10,000; so does the reader, before the value ends."""
    with pytest.raises(Undecodable, match="max depth"):
        feed_all([b"[" * 10_001])
    with pytest.raises(Undecodable, match="max depth"):
        feed_all([b"[" * 10_001 + b"]" * 10_001])


@pytest.mark.parametrize("split", [False, True])
def test_nesting_to_go_depth_decodes_without_recursion(split: bool) -> None:
    """Values nested exactly 10,000 deep, as Go's decoder accepts them, decode (Python's
    own parser recursed and gave up near 1,000 levels); arrays and objects alike."""
    arrays = b"[" * 10_000 + b"]" * 10_000 + b"\n"
    objects = b'{"a":' * 9_999 + b"{}" + b"}" * 9_999 + b"\n"
    for data in (arrays, objects):
        chunks = [data[: len(data) // 3], data[len(data) // 3 :]] if split else [data]
        done, value = feed_all(chunks)
        assert done
        depth = 1
        while value:
            value = value[0] if isinstance(value, list) else value["a"]
            depth += 1
        assert 10_000 == depth


@pytest.mark.parametrize(
    "text",
    [
        b"1" + b"0" * 400,
        b"[-1" + b"0" * 400 + b"]",
        b'{"a": [1, 2, 3' + b"0" * 320 + b"]}",
    ],
)
def test_an_integer_past_float64_is_refused_without_a_payload_type(text: bytes) -> None:
    """Go decodes an untyped number into a float64: an integer like 10**400 is refused, as
    it is into a float field; one within float64's range is kept, exactly."""
    with pytest.raises(Undecodable, match="out of range"):
        feed_all([text, b"\n"])
    assert (True, [10**300]) == feed_all([b"[1" + b"0" * 300 + b"]\n"])


@pytest.mark.parametrize(
    "text", [b'{"a": [1, 2e400]}', b"[1e+400]", b"[" + b"9" * 320 + b"]", b'["e", 1E-0400, 1e400]']
)
def test_a_number_past_float64_is_refused_however_it_is_split(text: bytes) -> None:
    """Framing looks for numbers a float64 may not hold chunk by chunk: one cut anywhere,
    even fed a byte at a time, is still found (and refused as Go refuses it)."""
    with pytest.raises(Undecodable, match="out of range"):
        feed_all([bytes([b]) for b in text] + [b"\n"])
    for cut in range(1, len(text)):
        with pytest.raises(Undecodable, match="out of range"):
            feed_all([text[:cut], text[cut:], b"\n"])


@pytest.mark.parametrize(
    "chunks",
    [[b'{"a": [1}'], [b'{"a": [1', b"}"], [b'[{"a": "]"', b"]"], [b"[[", b"}"]],
)
def test_mismatched_brackets_are_refused_as_they_arrive(chunks: list[bytes]) -> None:
    """A closing bracket of the wrong kind is refused at once, without waiting for EOF,
    whichever chunk it comes in (and brackets inside strings do not count)."""
    with pytest.raises(Undecodable, match="mismatched"):
        feed_all(chunks)


#: Strings full of what framing must see through: quotes, backslashes, brackets.
tricky_text = st.text(st.sampled_from('[]{}"\\ ,:ab\n\u00e9'), max_size=8)
tricky_values = st.recursive(
    st.none() | st.integers(-5, 5) | tricky_text,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(tricky_text, children, max_size=4)
    ),
    max_leaves=12,
)


@given(value=tricky_values, data=st.data())
def test_framing_completes_exactly_when_the_value_does(value: Any, data: st.DataObject) -> None:
    """Split anywhere (inside escapes, between a backslash and what it escapes), a value is
    reported complete by the chunk that holds its last byte, never before, and decodes to
    json.loads' result."""
    assert_framed_exactly(json.dumps(value).encode(), data, 6)


#: Strings of what may also stand outside a string (separators, whitespace, the letters of
#: true, false and null) and two bytes that may not: framing places the quotes of a chunk
#: with no bracket, digit or backslash from the texts around its last quotes alone.
plain_text = st.text(st.sampled_from(" ,:+-.eEtrufalsn\tx\u00e9"), max_size=10)
plain_values = st.recursive(
    st.none() | st.booleans() | plain_text,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(plain_text, children, max_size=4)
    ),
    max_leaves=16,
)


@given(value=plain_values, data=st.data(), ascii_only=st.booleans())
def test_framing_places_quotes_in_plain_chunks_exactly(
    value: Any, data: st.DataObject, ascii_only: bool
) -> None:
    """Chunks of strings and separators only (no bracket, digit or backslash), cut anywhere,
    leave the string state where a pass over every quote would: the value is complete with
    the chunk that holds its last byte, never before."""
    assert_framed_exactly(json.dumps(value, ensure_ascii=ascii_only).encode(), data, 12)


def assert_framed_exactly(text: bytes, data: st.DataObject, cuts: int) -> None:
    """Cut *text* in up to *cuts* places: complete exactly with its last byte, as json.loads."""
    if not text.startswith((b"[", b"{", b'"')):
        text = b"[" + text + b"]"
    points = sorted(data.draw(st.sets(st.integers(1, len(text) - 1), max_size=cuts)))
    chunks = [*split(text, points), b"\n"]
    reader = RequestReader(CAP)
    for index, chunk in enumerate(chunks):
        complete = reader.feed(chunk)
        last_byte_arrived = sum(map(len, chunks[: index + 1])) >= len(text)
        assert last_byte_arrived == complete
        if complete:
            break
    assert json.loads(text) == finish(reader.decoding())


@contextlib.contextmanager
def small_slices(slice_: int, probe: int, c_depth: int, window: int = 1) -> Iterator[None]:
    """Make the decoder cut its work small, so a small value takes every path of a large one:
    batches, probes, the depth the C decoder is trusted with, and the windows of text it
    reads the request in (a few characters at a time: every value straddles some)."""
    saved = (request.SLICE, request._PROBE, request._C_DEPTH, request._WINDOW)
    request.SLICE, request._PROBE, request._C_DEPTH, request._WINDOW = (
        slice_,
        probe,
        c_depth,
        window,
    )
    try:
        yield
    finally:
        request.SLICE, request._PROBE, request._C_DEPTH, request._WINDOW = saved


@given(
    value=json_values,
    slice_=st.integers(1, 40),
    probe=st.integers(1, 40),
    c_depth=st.integers(0, 4),
    indent=st.sampled_from([None, 0, 2]),
)
def test_sliced_decoding_agrees_with_json_loads(
    value: Any, slice_: int, probe: int, c_depth: int, indent: int | None
) -> None:
    """Decoded in batches cut at verified separators, element by element, or walked into,
    a value comes out as json.loads makes it, whatever the cuts."""
    text = json.dumps(value, indent=indent)
    with small_slices(slice_, probe, c_depth):
        assert (json.loads(text), len(text)) == finish(decoding(text.encode()))


@given(
    value=json_values,
    cuts=st.lists(st.integers(0, 10_000), max_size=8),
    slice_=st.integers(1, 12),
    window=st.integers(1, 24),
    ascii_only=st.booleans(),
)
def test_a_request_read_in_small_windows_decodes_as_in_one(
    value: Any, cuts: list[int], slice_: int, window: int, ascii_only: bool
) -> None:
    """The decoder reads the request's chunks as text a window at a time: whatever the
    reads and the windows cut (a character's UTF-8 bytes, a number, a string, an escape,
    whitespace), the value comes out as json.loads makes it."""
    text = json.dumps([value, value], ensure_ascii=ascii_only, indent=1)
    data = text.encode()
    with small_slices(slice_, slice_, 2, window):
        assert (True, json.loads(text)) == feed_all(split(data, cuts))
        assert (json.loads(text), len(text)) == finish(decoding(data + b" x"))


@pytest.mark.parametrize("window", [1, 2, 3, 5, 8])
def test_values_longer_than_a_window_are_read_whole(window: int) -> None:
    """A string, a number or a run of whitespace longer than any window is retried in a
    longer one, not cut: 12|34 is 1234, 1.|5 is 1.5, "ab|c" is "abc"."""
    values = ["x" * 300, 10**200, 1.5e-300, -0.25, True, None, "\u00e9\ud800", {"k" * 50: 1}]
    text = "[" + ", ".join(json.dumps(v) for v in values) + " " * 200 + "]"
    with small_slices(1, 1, 2, window):
        got, end = finish(decoding(text.encode()))
    assert (json.loads(text)[:-2], len(text)) == (got[:-2], end)
    assert ["\u00e9\ufffd", {"k" * 50: 1}] == got[-2:]


@given(
    value=json_values,
    slice_=st.integers(1, 40),
    c_depth=st.integers(0, 4),
    at=st.integers(0, 10_000),
    junk=st.sampled_from(["", ",", "]", "}", "[", "{", ":", "x", '"', "1", " ,"]),
)
def test_sliced_decoding_refuses_what_json_loads_refuses(
    value: Any, slice_: int, c_depth: int, at: int, junk: str
) -> None:
    """With one stray character put anywhere, the sliced decoder refuses exactly what the
    C decoder refuses, and otherwise decodes the same value."""
    text = json.dumps(value)
    at %= len(text) + 1
    bad = text[:at] + junk + text[at:]
    try:
        expected = request._DECODERS[(False, True)].raw_decode(bad)[0]
    except (ValueError, RecursionError):
        with small_slices(slice_, slice_, c_depth), pytest.raises(Undecodable):
            finish(decoding(bad.encode()))
        return
    with small_slices(slice_, slice_, c_depth):
        got = finish(decoding(bad.encode()))[0]
    if has_surrogate_escape(bad):
        expected = request._replace_surrogates(expected)
    assert expected == got


def test_a_large_value_is_decoded_in_slices() -> None:
    """A request of a few MiB is decoded by a generator that yields every SLICE or so of
    work (the server runs one slice per turn of its loop), not in one call."""
    data = b"[" + b"{}," * 400_000 + b"{}]"
    steps = decoding(data)
    yields = 0
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            value, _ = stop.value
            break
        yields += 1
    assert [{}] * 400_001 == value
    assert yields >= len(data) // request.SLICE // 2


# --- decoding as Go's encoding/json does ----------------------------------------------------


def go_unquote_model(units: list[int]) -> str:
    """Decode a string written as ``\\uXXXX`` escapes of *units*, as Go's ``unquote`` does:
    a valid surrogate pair is one character, any other surrogate is U+FFFD."""
    out = []
    i = 0
    while i < len(units):
        unit = units[i]
        if 0xD800 <= unit < 0xDC00 and i + 1 < len(units) and 0xDC00 <= units[i + 1] < 0xE000:
            out.append(chr(0x10000 + ((unit - 0xD800) << 10) + (units[i + 1] - 0xDC00)))
            i += 2
            continue
        out.append("\ufffd" if 0xD800 <= unit < 0xE000 else chr(unit))
        i += 1
    return "".join(out)


@given(
    units=st.lists(
        st.one_of(st.integers(0xD7F0, 0xE010), st.integers(0x20, 0x7E)), min_size=1, max_size=12
    )
)
def test_surrogate_escapes_decode_as_go_decodes_them(units: list[int]) -> None:
    """A lone surrogate escape becomes U+FFFD, a valid pair one character, in values and keys."""
    escaped = "".join(f"\\u{unit:04x}" for unit in units)
    expected = go_unquote_model(units)
    for body in (f'"{escaped}"', f'["{escaped}"]', f'{{"{escaped}": "{escaped}"}}'):
        done, value = feed_all([body.encode(), b"\n"])
        assert done
        if isinstance(value, dict):
            assert {expected: expected} == value
        else:
            assert expected == (value if isinstance(value, str) else value[0])
    assert (True, expected) == feed_all([f'"{escaped}"\n'.encode()])  # the one-chunk path


def test_a_surrogate_escape_cut_by_reads_is_replaced() -> None:
    """A ``\\u`` escape of a lone surrogate becomes U+FFFD however the reads cut it (the
    framer looks for one across each read's end), beside escapes that change nothing."""
    data = b'["a\\n", "\\ud800", "\\\\ud800"]\n'
    expected = ["a\n", "\ufffd", "\\ud800"]
    for first, second in itertools.combinations(range(1, len(data)), 2):
        chunks = [data[:first], data[first:second], data[second:]]
        assert (True, expected) == feed_all(chunks)


def test_surrogates_in_a_large_value_are_replaced_in_slices() -> None:
    """Replacing lone surrogates in a large decoded value goes a range of items at a time
    (the server runs one slice per turn), in lists, dicts and kept members alike."""
    count = 50_000
    value: Any = {
        "list": ["\ud800"] * count,
        "dict": {f"k{i}\udc00": "\udfff" for i in range(count)},
        "members": request.Pairs((f"m{i}", "\ud800") for i in range(count)),
    }
    steps = request._replacing(value)
    yields = 0
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            fixed = stop.value
            break
        yields += 1
    assert yields >= 3 * count // request._REPLACE_STEP
    assert ["\ufffd"] * count == fixed["list"]
    assert {f"k{i}\ufffd": "\ufffd" for i in range(count)} == fixed["dict"]
    assert [(f"m{i}", "\ufffd") for i in range(count)] == fixed["members"]


def test_surrogates_are_replaced_in_members_kept_for_a_dataclass() -> None:
    """Decoded for a dataclass (members kept in order, repeats too), keys and values,
    nested ones included, get U+FFFD for a lone surrogate escape as well."""
    data = b'{"a\\ud800": ["\\udc00", {"b": "\\ud800"}], "a\\ud800": "x\\udfff"}\n'
    expected = [("a\ufffd", ["\ufffd", [("b", "\ufffd")]]), ("a\ufffd", "x\ufffd")]
    assert (True, expected) == feed_all([data], pairs=True)  # one read
    assert (True, expected) == feed_all([data[:9], data[9:]], pairs=True)  # framed


def test_a_lone_surrogate_never_reaches_the_payload() -> None:
    """A lone surrogate escape becomes U+FFFD: the payload always encodes to UTF-8."""
    done, value = feed_all([b'{"repos": ["\\ud800", "a\\udfffb"], "note\\udc00": 1}\n'])
    assert done
    assert {"repos": ["\ufffd", "a\ufffdb"], "note\ufffd": 1} == value
    converted = dataclass_decoder(Payload)(value)
    assert ["\ufffd", "a\ufffdb"] == converted.repos
    "".join(converted.repos).encode()  # what a subprocess argv needs


@pytest.mark.parametrize("text", [b"1e400", b"-1e400", b"[1e999]", b'{"ratio": 1E+400}'])
def test_a_float_too_large_for_a_float64_is_undecodable(text: bytes) -> None:
    """Go's decoder refuses a number its float64 cannot hold; so does the reader."""
    with pytest.raises(Undecodable, match="out of range"):
        feed_all([text, b"\n"])


def test_numbers_out_of_range_for_their_field_are_undecodable() -> None:
    """An int field takes Go's int64 range; a float field refuses what overflows a float64."""
    convert = dataclass_decoder(Payload)
    assert 2**63 - 1 == convert({"count": 2**63 - 1}).count
    assert -(2**63) == convert({"count": -(2**63)}).count
    for value in ({"count": 2**63}, {"count": -(2**63) - 1}, {"count": 99999999999999999999}):
        with pytest.raises(Undecodable, match="out of range"):
            convert(value)
    with pytest.raises(Undecodable, match="out of range"):
        convert({"ratio": 10**400})
    assert 0.0 == convert(feed_all([b'{"ratio": 1e-400}\n'])[1]).ratio  # underflow is zero


def decoded(text: bytes) -> Payload:
    """*text* decoded as the server decodes a request for ``payload_type=Payload``."""
    done, value = feed_all([text, b"\n"], pairs=True)
    assert done
    result = dataclass_decoder(Payload)(value)
    assert isinstance(result, Payload)
    return result


def test_of_two_keys_for_one_field_the_last_wins() -> None:
    """Keys that differ only in case name the same field; the last one wins, as in Go."""
    assert ["b"] == decoded(b'{"repos": ["a"], "REPOS": ["b"]}').repos
    assert ["a"] == decoded(b'{"REPOS": ["b"], "repos": ["a"]}').repos
    assert ["c"] == decoded(b'{"repos": ["a"], "Repos": ["b"], "repos": ["c"]}').repos


def test_a_null_member_does_what_it_does_to_a_go_struct() -> None:
    """Members apply in order, as Go fills a struct: null leaves a string, number, boolean
    or struct field as it was ({"id":"a","id":null} keeps "a"), and empties a list, a map,
    an optional or an Any field (Go sets the slice, map, pointer or interface to nil)."""
    kept = decoded(
        b'{"note": "a", "note": null, "count": 2, "count": null, "ratio": 2.5, "ratio": null,'
        b' "flag": true, "flag": null, "inner": {"name": "x"}, "inner": null}'
    )
    assert ("a", 2, 2.5, True, Inner("x")) == (
        kept.note,
        kept.count,
        kept.ratio,
        kept.flag,
        kept.inner,
    )
    emptied = decoded(
        b'{"repos": ["a"], "REPOS": null, "env": {"K": "v"}, "env": null,'
        b' "maybe": 5, "maybe": null, "anything": [1], "anything": null}'
    )
    assert ([], {}, None, None) == (emptied.repos, emptied.env, emptied.maybe, emptied.anything)


def test_keys_fold_as_go_folds_them() -> None:
    """Go's per-character simple folding: the Kelvin sign is k, long s is s, ß is not ss."""

    @dataclass
    class Folded:
        kind: str = ""
        sum: str = ""
        strasse: str = ""

    convert = dataclass_decoder(Folded)
    assert Folded("K", "S") == convert({"\u212aIND": "K", "\u017fUM": "S", "STRAßE": "x"})


@pytest.mark.parametrize(
    ("chunks", "eof"),
    [
        ([b'{"a": "xy'], True),
        ([b'"unterminated'], True),
        ([b"[1, 2"], True),
        ([b"1.\n"], False),
        ([b'{"a" 1}\n'], False),
        ([b"\x00\n"], False),
    ],
)
def test_undecodable_messages_read_cleanly(chunks: list[bytes], eof: bool) -> None:
    """The reason logged for an undecodable request is one clean phrase ('at at' was doubled)."""
    with pytest.raises(Undecodable) as caught:
        feed_all(chunks, eof=eof)
    message = str(caught.value)
    assert " at at " not in message
    assert message.count(" at ") <= 1
