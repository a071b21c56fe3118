"""run keeps subprocess.run's contract: arguments, results, errors and large pipes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sched_cmd_testkit import python

from sched_cmd import run

MIB = 1 << 20


def test_captures_bytes_and_returncode_like_subprocess_run() -> None:
    """capture_output gives bytes stdout and stderr and the exit status."""
    result = run(["sh", "-c", "echo out; echo err >&2; exit 3"], capture_output=True)
    assert isinstance(result, subprocess.CompletedProcess)
    assert (["sh", "-c", "echo out; echo err >&2; exit 3"], 3, b"out\n", b"err\n") == (
        result.args,
        result.returncode,
        result.stdout,
        result.stderr,
    )


def test_text_mode_decodes_with_the_given_encoding_and_translates_newlines() -> None:
    """text/encoding/errors decode as subprocess does, newlines translated."""
    code = 'import sys; sys.stdout.buffer.write("é\\r\\nx\\ry\\n".encode("latin-1"))'
    result = run(python(code), capture_output=True, encoding="latin-1")
    assert "é\nx\ny\n" == result.stdout
    assert "" == result.stderr


def test_popen_keywords_keep_working(tmp_path: Path) -> None:
    """cwd, env, stdout to a real file and stderr=STDOUT pass through to Popen."""
    out = tmp_path / "out.txt"
    with out.open("wb") as sink:
        result = run(
            ["sh", "-c", 'pwd; echo "$GREETING"; echo oops >&2'],
            cwd=tmp_path,
            env={"GREETING": "hello", "PATH": os.environ["PATH"]},
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    assert (None, None) == (result.stdout, result.stderr)
    assert f"{tmp_path}\nhello\noops\n" == out.read_text()


def test_stderr_to_stdout_merges_into_captured_stdout() -> None:
    """stdout=PIPE with stderr=STDOUT captures both streams in stdout."""
    result = run(
        ["sh", "-c", "echo a; echo b >&2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert (b"a\nb\n", None) == (result.stdout, result.stderr)


def test_check_raises_called_process_error_with_the_output() -> None:
    """check=True raises subprocess's own CalledProcessError, carrying the output."""
    with pytest.raises(subprocess.CalledProcessError) as caught:
        run(["sh", "-c", "echo why; exit 7"], check=True, capture_output=True, text=True)
    assert (7, "why\n", "") == (caught.value.returncode, caught.value.stdout, caught.value.stderr)
    assert 0 == run(["true"], check=True).returncode


def test_input_in_text_mode_is_encoded_and_stdin_pipe_without_input_gets_eof() -> None:
    """str input needs text mode; stdin=PIPE without input reads EOF at once."""
    assert "héllo" == run(["cat"], input="héllo", capture_output=True, encoding="utf-8").stdout
    assert b"" == run(["cat"], stdin=subprocess.PIPE, capture_output=True).stdout
    with pytest.raises(TypeError, match="text mode"):
        run(["cat"], input="text", capture_output=True)


def test_input_the_child_never_reads_does_not_fail() -> None:
    """A child that exits without reading its input breaks the pipe harmlessly."""
    result = run(["true"], input=b"x" * (4 * MIB))
    assert 0 == result.returncode


def test_more_than_a_mebibyte_on_stdout_and_stderr_at_once_is_captured_intact() -> None:
    """Both pipes filling at the same time never deadlock, and nothing is lost."""
    code = """
    import os, sys
    block = bytes(range(256)) * 4096
    for _ in range(3):
        sys.stdout.buffer.write(block)
        sys.stderr.buffer.write(block[::-1])
    """
    result = run(python(code), capture_output=True)
    block = bytes(range(256)) * 4096
    assert block * 3 == result.stdout
    assert block[::-1] * 3 == result.stderr


def test_more_than_a_mebibyte_of_input_is_echoed_on_both_pipes() -> None:
    """stdin, stdout and stderr all past their pipe buffers at once never deadlock."""
    data = os.urandom(3 * MIB)
    code = """
    import sys
    while chunk := sys.stdin.buffer.read1(65536):
        sys.stdout.buffer.write(chunk)
        sys.stderr.buffer.write(chunk)
    """
    result = run(python(code), input=data, capture_output=True)
    assert (data, data) == (result.stdout, result.stderr)


@given(st.binary(max_size=200_000))
def test_cat_round_trips_any_bytes(data: bytes) -> None:
    """Whatever goes in through input comes back on stdout, byte for byte."""
    assert data == run(["cat"], input=data, capture_output=True).stdout


@given(st.text(alphabet=st.sampled_from("ab\r\n\té€"), max_size=500))
def test_text_mode_matches_subprocess_run(text: str) -> None:
    """In text mode the result equals subprocess.run's for the same input."""
    expected = subprocess.run(
        ["cat"], input=text, capture_output=True, encoding="utf-8", check=False
    )
    actual = run(["cat"], input=text, capture_output=True, encoding="utf-8")
    assert (expected.stdout, expected.stderr) == (actual.stdout, actual.stderr)


def test_conflicting_arguments_are_rejected_like_subprocess_run() -> None:
    """input with stdin, capture_output with stdout/stderr: ValueError, nothing started."""
    with pytest.raises(ValueError, match="stdin and input"):
        run(["true"], input=b"", stdin=subprocess.DEVNULL)
    with pytest.raises(ValueError, match="capture_output"):
        run(["true"], capture_output=True, stdout=subprocess.DEVNULL)
    with pytest.raises(ValueError, match="process_group"):
        run(["true"], kill_group=True, process_group=os.getpgid(0))


def test_kill_group_makes_the_child_lead_its_own_group() -> None:
    """kill_group=True starts the child in a new process group it leads."""
    code = "import os; print(os.getpid() == os.getpgid(0))"
    assert b"True\n" == run(python(code), kill_group=True, capture_output=True).stdout
    new_session = run(python(code), kill_group=True, start_new_session=True, capture_output=True)
    assert b"True\n" == new_session.stdout


def test_a_missing_program_raises_the_popen_error() -> None:
    """A command that cannot start raises what Popen raises."""
    with pytest.raises(FileNotFoundError):
        run(["/nonexistent/sched-cmd-test-program"])


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"grace": float("nan")}, ValueError),
        ({"grace": True}, ValueError),
        ({"timeout": float("inf")}, ValueError),
        ({"timeout": "5s"}, TypeError),
        ({"stop": object()}, TypeError),
    ],
)
def test_bad_arguments_raise_before_anything_starts(
    arguments: dict[str, object], error: type[Exception]
) -> None:
    """Durations follow the shared rules; stop must be a threading.Event."""
    with pytest.raises(error):
        run(["true"], **arguments)  # type: ignore[arg-type]


def test_durations_accept_timedelta_and_seconds() -> None:
    """grace and timeout take a timedelta or a number of seconds."""
    stop = threading.Event()
    assert 0 == run(["true"], grace=timedelta(milliseconds=250), timeout=30, stop=stop).returncode
    assert 0 == run(["true"], grace=0.25, timeout=timedelta(seconds=30)).returncode


def test_python_child_sees_its_argv() -> None:
    """args is passed through untouched (a sanity check of the test helper too)."""
    result = run([*python("import sys; print(sys.argv[1:])"), "a b"], capture_output=True)
    assert f"{['a b']}\n".encode() == result.stdout
    assert sys.executable == result.args[0]
