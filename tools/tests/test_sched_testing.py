"""The shared test kit (testing/sched_testing.py) does what every suite relies on."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from sched_testing import Child, fd_targets, find_go, hex_lines, open_fds, socket_dir

ECHO = """
import sys
print("ready", flush=True)
for line in sys.stdin:
    print(line.strip().upper(), flush=True)
print("bye", file=sys.stderr, flush=True)
print("done", flush=True)
"""


def test_a_child_talks_line_by_line_and_is_reaped() -> None:
    """Lines written together are read one by one; the rest comes after the exit; the
    context manager leaves no process and no descriptor behind."""
    before = open_fds()
    with Child(ECHO) as child:
        child.expect("ready")
        child.send("a")
        child.write_line("b")
        assert ["A", "B"] == [child.read_line(), child.read_line()]
        assert 0 == child.finish()
        assert "done\n" == child.rest()
        assert "bye\n" == child.stderr_text()
    assert child.process.returncode == 0
    assert before == open_fds()


def test_a_child_that_dies_names_its_stderr() -> None:
    """Reading from a child that exited fails with what it wrote to stderr."""
    with (
        Child("import sys; sys.exit('broken on purpose')") as child,
        pytest.raises(AssertionError, match="broken on purpose"),
    ):
        child.read_line()


def test_hex_lines_asks_a_helper_one_line_at_a_time() -> None:
    """Each question goes hex-encoded on one line; each answer is one line."""
    helper = "import sys\nfor line in sys.stdin:\n    print(len(bytes.fromhex(line)), flush=True)"
    with hex_lines(sys.executable, "-c", helper) as ask:
        assert [b"0\n", b"3\n"] == [ask(b""), ask(b"\x00\n\xff")]


def test_fd_targets_name_what_each_descriptor_is(tmp_path: Path) -> None:
    """A file opened shows with its path."""
    path = tmp_path / "f"
    fd = os.open(path, os.O_CREAT | os.O_RDONLY)
    try:
        assert str(path) == fd_targets()[str(fd)]
    finally:
        os.close(fd)


def test_socket_dir_is_short_and_removed() -> None:
    """The folder is short enough for a socket path, and gone afterwards."""
    with socket_dir() as tmp:
        assert len(f"{tmp}/trigger.sock") < 100
    assert not Path(tmp).exists()


def test_a_go_too_old_skips_locally_and_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Go as new as asked: a skip that says so, or under CI a failure."""
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"need Go >= 99\.0"):
        find_go(minimum=(99, 0))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"need Go >= 99\.0"):
        find_go(minimum=(99, 0))
