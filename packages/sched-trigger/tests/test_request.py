"""Request framing and payload decoding, as a Go daemon reads a request."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sched_trigger_testkit import json_values

from sched_trigger._request import RequestReader, Undecodable, dataclass_decoder

CAP = 1 << 20


def feed_all(chunks: list[bytes], *, cap: int = CAP, eof: bool = False) -> tuple[bool, Any]:
    """Feed *chunks* in order; return the first complete value (or finish at EOF)."""
    reader = RequestReader(cap)
    for chunk in chunks:
        done, value = reader.feed(chunk)
        if done:
            return True, value
    if eof:
        return True, reader.feed_eof()
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
