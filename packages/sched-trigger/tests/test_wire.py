"""The wire format: byte for byte as the Go library's encoding/json writes it."""

from __future__ import annotations

import json
import pickle
import random
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sched_testing import find_go, hex_lines
from sched_trigger_testkit import go_event_model, json_values, wire_text

from sched_trigger import Event
from sched_trigger._wire import encode_event, encode_payload, go_quote

GO_WIRE = Path(__file__).parent / "go_wire" / "main.go"


def test_event_keys_in_go_order_with_omitempty() -> None:
    """Keys are event, reason, duration_ms, ok; empty reason and zero duration are omitted."""
    assert b'{"event":"queued","ok":false}\n' == encode_event("queued", False)
    assert b'{"event":"done","reason":"boom","duration_ms":1500,"ok":false}\n' == encode_event(
        "done", False, "boom", 1500
    )
    assert b'{"event":"done","reason":"skipped: lock held","ok":true}\n' == encode_event(
        "done", True, "skipped: lock held"
    )
    assert b'{"event":"done","duration_ms":3,"ok":true}\n' == encode_event("done", True, "", 3)


def test_go_escapes_html_and_line_separators() -> None:
    """<, >, &, U+2028 and U+2029 are \\u escapes; other non-ASCII stays raw UTF-8."""
    expected = '"\\u003ca\\u003e \\u0026 \\u2028\\u2029 é ☃ \\n\\t\\b\\f\\u0001\x7f"'
    assert expected == go_quote("<a> & \u2028\u2029 é ☃ \n\t\b\f\x01\x7f")


def test_lone_surrogates_become_raw_replacement_characters() -> None:
    """A lone surrogate (an undecodable byte) is written as a raw U+FFFD, as Go 1.27 writes an
    invalid byte (not the \\ufffd escape of older Go), keeping the line UTF-8."""
    assert '"a\ufffdb\ufffd"' == go_quote("a\udcffb\ud800")
    assert b'{"event":"done","reason":"\xef\xbf\xbd","ok":false}\n' == encode_event(
        "done", False, "\udc80"
    )
    assert b'{"\xef\xbf\xbd":["\xef\xbf\xbd"]}\n' == encode_payload({"\udc80": ["\ud800"]})


@given(kind=wire_text, reason=wire_text, duration_ms=st.integers(0, 2**53), ok=st.booleans())
def test_event_encoding_matches_go_model(
    kind: str, reason: str, duration_ms: int, ok: bool
) -> None:
    """Every event encodes exactly as the independent model of Go's encoder."""
    expected = go_event_model(kind, reason, duration_ms, ok)
    assert expected == encode_event(kind, ok, reason, duration_ms)
    assert expected == Event(kind, reason, duration_ms, ok).encode()


@given(kind=wire_text, reason=wire_text, duration_ms=st.integers(0, 2**53), ok=st.booleans())
def test_event_round_trip(kind: str, reason: str, duration_ms: int, ok: bool) -> None:
    """Decoding an encoded event gives it back (surrogates come back as U+FFFD)."""
    event = Event(kind, reason, duration_ms, ok)
    decoded = Event.decode(event.encode())

    def clean(text: str) -> str:
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)

    assert Event(clean(kind), clean(reason), duration_ms, ok) == decoded


def test_event_decoding_is_lenient_like_go() -> None:
    """Missing keys take zero values, unknown keys and nulls are ignored, names match any case."""
    assert Event("done") == Event.decode(b'{"event":"done"}')
    assert Event("done", "r", 5, True) == Event.decode(
        '{"Event":"done","REASON":"r","duration_ms":5,"ok":true,"extra":[1]}\n'
    )
    assert Event("started") == Event.decode('{"event":"started","reason":null}')


def test_event_decoding_follows_go_encoding_json() -> None:
    """The last of two keys naming one field wins; invalid UTF-8 and lone surrogate escapes
    become U+FFFD, as Go's client decodes them."""
    assert Event("done", ok=True) == Event.decode(b'{"event":"done","ok":false,"OK":true}')
    assert Event("done", ok=True) == Event.decode(
        b'{"event":"done","ok":true,"OK":false,"ok":true}'
    )
    assert Event("done", "a\ufffdb") == Event.decode(b'{"event":"done","reason":"a\\ud800b"}')
    assert Event("done", "\ufffd\ufffdx") == Event.decode(b'{"event":"done","reason":"\xe2\x82x"}')
    assert Event("done", ok=True) == Event.decode(b'{"event":"done","ok":true,"x":1e400}')


def test_event_members_apply_in_order_as_go_unmarshal_does() -> None:
    """Members apply in order: null leaves a field as an earlier key set it (the last
    non-null value wins), a wrong type anywhere is malformed even when a later key is
    right, and a line that is just null is the zero event (kind "", which clients skip)."""
    assert Event("done", "x") == Event.decode(b'{"event":"done","reason":"x","REASON":null}')
    assert Event("done", "b") == Event.decode(b'{"event":"done","reason":"a","Reason":"b"}')
    with pytest.raises(ValueError, match="'ok' has the wrong type"):
        Event.decode(b'{"event":"done","ok":"yes","OK":true}')
    assert Event("") == Event.decode(b"null")


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"[]",
        b'{"event":5}',
        b'{"event":"done","ok":"yes"}',
        b'{"duration_ms":1.5}',
        b"{x",
        b'{"event":"done","duration_ms":9223372036854775808}',
        b'{"event":"done","ok":true,"x":NaN}',
        b"[" * 100_000,
        b'{"event":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ],
)
def test_event_decoding_rejects_malformed_lines(line: bytes) -> None:
    """A line that is not an event object is a ValueError."""
    with pytest.raises(ValueError, match="malformed event"):
        Event.decode(line)


def test_event_is_a_frozen_value() -> None:
    """Event is immutable, hashable, picklable, comparable, with a timedelta view."""
    event = Event("done", "x", 1234, True)
    assert timedelta(milliseconds=1234) == event.duration
    assert event == pickle.loads(pickle.dumps(event))
    assert {event} == {Event("done", "x", 1234, True)}
    assert "Event(kind='done', reason='x', duration_ms=1234, ok=True)" == repr(event)
    with pytest.raises(AttributeError):
        event.ok = False
    with pytest.raises(AttributeError):
        del event.kind
    match event:
        case Event("done", reason, ms, ok):
            assert ("x", 1234, True) == (reason, ms, ok)
        case _:  # pragma: no cover
            pytest.fail("Event does not pattern-match positionally")


@dataclass
class _Inner:
    name: str = ""


@dataclass
class _Outer:
    repos: list[str] = field(default_factory=list)
    inner: _Inner = field(default_factory=_Inner)
    env: dict[str, str] = field(default_factory=dict)


def test_payload_encoding_is_compact_go_json() -> None:
    """Payloads are one compact line: dataclasses in field order, Go's string escaping."""
    payload = _Outer(["a<b"], _Inner("é"), {"K": "v&"})
    expected = b'{"repos":["a\\u003cb"],"inner":{"name":"\xc3\xa9"},"env":{"K":"v\\u0026"}}\n'
    assert expected == encode_payload(payload)
    assert b"{}\n" == encode_payload({})


def test_payload_encoding_refuses_what_go_refuses() -> None:
    """NaN and infinities are ValueErrors, unserializable values TypeErrors."""
    with pytest.raises(ValueError, match="Out of range float"):
        encode_payload({"x": float("nan")})
    with pytest.raises(TypeError, match="not JSON serializable"):
        encode_payload({"x": object()})
    with pytest.raises(TypeError, match="not JSON serializable"):
        encode_payload(_Outer)


@given(value=json_values)
def test_payload_encoding_round_trips(value: object) -> None:
    """Any JSON value encodes to one line that parses back to the same value."""
    line = encode_payload(value)
    assert line.endswith(b"\n")
    assert 1 == line.count(b"\n")
    assert value == json.loads(line)


@pytest.fixture(scope="module")
def go_wire() -> Iterator[Path]:
    """``go_wire/main.go`` built with Go 1.27 or newer (the Go library's floor)."""
    toolchain = find_go()
    with tempfile.TemporaryDirectory() as tmp:
        yield toolchain.build(GO_WIRE, Path(tmp))


def test_encoding_matches_the_real_go_encoder(go_wire: Path) -> None:
    """Go's own encoding/json (Go 1.27 or newer, the Go library's floor) writes the very
    same bytes.

    Strings are drawn as raw bytes (invalid UTF-8 included, as undecodable
    bytes reach Python as lone surrogates: Go 1.27 writes each invalid byte as
    a raw U+FFFD), as an event's reason and in a request payload, as a key and
    as a value.
    """
    rng = random.Random(20261202)
    alphabet = bytes(range(256))
    # Bytes around the interesting ranges: ASCII controls, HTML, UTF-8 lead and tail bytes.
    samples = [
        bytes(rng.choice(alphabet) for _ in range(rng.randrange(40))) for _ in range(300)
    ] + [c.encode() for c in "\u2028\u2029é☃\U0001f600\ufffd"]
    reasons = [
        *samples,
        b"<>&",
        "\u2028\u2029".encode(),
        b"\xff\xfe",
        b"\xed\xa0\x80",
        b"\xe2\x82A",
        b"\x7f",
    ]
    go_out = subprocess.run(
        [str(go_wire)],
        input=b"".join(r.hex().encode() + b"\n" for r in reasons),
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.splitlines(keepends=True)
    ours = []
    for reason in reasons:
        text = reason.decode("utf-8", "surrogateescape")
        ours.append(encode_event("done", True, text, 7))
        ours.append(encode_payload({text: [text]}))
    assert go_out == ours


@pytest.fixture(scope="module")
def go_decode(go_wire: Path) -> Iterator[Callable[[bytes], bytes]]:
    """Go's reading of one event line (``json.Unmarshal`` into the Event struct): the event
    encoded again, or ``error``."""
    with hex_lines(go_wire, "decode") as ask:
        yield ask


def _ours(line: bytes) -> bytes:
    """Our client's reading of one event line, in go_wire's terms."""
    try:
        return Event.decode(line).encode()
    except ValueError:
        return b"error\n"


#: Keys naming each field in several spellings, and keys naming none.
_KEYS = ["event", "Event", "EVENT", "reason", "Reason", "duration_ms", "Duration_MS", "ok", "OK",
         "x", "eVent", "o\\u212a", "rea\\u017fon", "\\u0065vent", "ok "]  # fmt: skip
#: Values of every JSON type, for every field: right, wrong, null, out of range.
_VALUES = ['"done"', '"queued"', '"a\\ud800b"', '"\\u00e9<"', '""', "null", "true", "false",
           "0", "7", "-3", "1.5", "1e3", "9223372036854775807", "9223372036854775808",
           "-9223372036854775809", "[1]", "{}", '{"ok":1}']  # fmt: skip

event_lines = st.one_of(
    st.lists(st.tuples(st.sampled_from(_KEYS), st.sampled_from(_VALUES)), max_size=7).map(
        lambda pairs: ("{" + ",".join(f'"{k}":{v}' for k, v in pairs) + "}").encode()
    ),
    st.sampled_from([b"[]", b"null", b'"done"', b"{", b'{"event":"done"} {}', b" {} ", b"",
                     b'{"event":"done","x":[[{"ok":"no"}]]}', b'{"ok":true,}', b"\t{}\r"]),
)  # fmt: skip


@given(line=event_lines)
def test_decoding_matches_the_real_go_decoder(
    go_decode: Callable[[bytes], bytes], line: bytes
) -> None:
    """An event line reads as Go's json.Unmarshal reads it into the Event struct: keys in
    order, an exact name before a case-insensitive one, null leaving the field as it was
    (so the last non-null value wins), a wrong type or an int64 overflow anywhere an
    error, and lone surrogate escapes as U+FFFD."""
    assert go_decode(line) == _ours(line)
