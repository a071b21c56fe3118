"""The counter reads as the Go library reads it: ``strconv.Atoi(strings.TrimSpace(...))``.

Go's ``TrimSpace`` trims Unicode white space (U+00A0, U+0085, U+3000...), and
``Atoi`` takes an optional sign, ASCII digits with any leading zeros, in the
int64 range; anything else, and anything negative, is zero. A small
standard-library Go program (``go_parse_count.go``, built offline) is the
reference for the differential property (skipped where Go is absent).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from sched_testing import find_go, hex_lines

from sched_exclusive._files import parse_count

GoCount = Callable[[bytes], int]

# Go's unicode.IsSpace, and look-alikes it does not trim.
GO_SPACE = " \t\r\n\v\f\x85\xa0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000"
NOT_SPACE = "\u200b\x1c\ufeff"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"1\n", 1),
        (b"00000000000000000001\n", 1),  # leading zeros, 20 digits
        (b"0" * 5000 + b"7", 7),  # far past Python's int-from-string digit limit
        ("1\u00a0".encode(), 1),
        ("\u3000\u2028 42 \u0085".encode(), 42),
        (b"+5\n", 5),
        (b"-0\n", 0),
        (b"-3\n", 0),
        (b"9223372036854775807\n", 2**63 - 1),
        (b"9223372036854775808\n", 0),  # out of int64: Atoi fails
        (b"1_000\n", 0),  # no underscores in base 10
        ("\u0661".encode(), 0),  # an Arabic-Indic digit is not a digit to Atoi
        ("\u200b1".encode(), 0),  # a zero-width space is not white space
        (b"\xff1", 0),  # an invalid byte stops the trim
        (b"", 0),
        (b"+", 0),
        (b" ", 0),
    ],
)
def test_the_counter_reads_as_go_reads_it(content: bytes, expected: int) -> None:
    """TrimSpace then Atoi, then zero for anything Atoi refuses or below zero."""
    assert expected == parse_count(content)


@pytest.fixture(scope="module")
def go_count(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GoCount]:
    """The Go library's parseCount, run by Go itself."""
    # Any Go reads these files the same way: the oldest still packaged (1.19) will do.
    binary = find_go(minimum=(1, 19)).build(
        Path(__file__).with_name("go_parse_count.go"), tmp_path_factory.mktemp("go")
    )
    with hex_lines(binary) as ask:

        def count(content: bytes) -> int:
            return int(ask(content))

        yield count


counter_texts = st.builds(
    lambda before, sign, zeros, digits, after: before + sign + "0" * zeros + digits + after,
    st.text(GO_SPACE + NOT_SPACE, max_size=3),
    st.sampled_from(["", "", "+", "-"]),
    st.integers(0, 25),
    st.one_of(
        st.integers(0, 2**64).map(str),
        st.text("0123456789_x\u0661", max_size=22),
    ),
    st.text(GO_SPACE + NOT_SPACE, max_size=3),
)


@given(st.one_of(counter_texts.map(str.encode), st.binary(max_size=30)))
@example(b"9223372036854775807")
@example(b"-9223372036854775808")
@example(b"\xc2\xa01\xc2")
def test_the_counter_reads_as_go_itself_reads_it(go_count: GoCount, content: bytes) -> None:
    """Whatever the bytes, the count is the one the Go library reads."""
    assert go_count(content) == parse_count(content)
