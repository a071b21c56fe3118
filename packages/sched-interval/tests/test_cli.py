"""``python -m sched_interval``, run as the operator runs it: a real child process."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from sched_interval._cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a fresh interpreter and capture what it prints."""
    return subprocess.run(
        [sys.executable, "-m", "sched_interval", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env={"PYTHONIOENCODING": "utf-8", "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "stdout", "stderr", "status"),
    [
        (["30m"], "mode: built-in\ninterval: 30m0s\n", "", 0),
        (["off"], "mode: external\ninterval: 6h0m0s\n", "", 0),
        (["0"], "mode: external\ninterval: 6h0m0s\n", "", 0),
        (["0", "--zero-as-once"], "mode: once\ninterval: 6h0m0s\n", "", 0),
        ([""], "mode: built-in\ninterval: 6h0m0s\n", "", 0),
        (["1500ns"], "mode: built-in\ninterval: 2µs\n", "", 0),
        (
            ["banana", "--default", "6h", "--name", "JOB_INTERVAL"],
            "mode: built-in\ninterval: 6h0m0s\n",
            "warning: cannot parse interval, using default:"
            " name=JOB_INTERVAL value='banana' default=6h0m0s\n",
            1,
        ),
        (
            ["-1h", "--default=2h"],
            "mode: built-in\ninterval: 2h0m0s\n",
            "warning: interval is negative, using default: name=interval value='-1h'"
            " default=2h0m0s\n",
            1,
        ),
        (
            ["10s", "--min", "1m", "--max", "1h", "--name", "SYNC_INTERVAL"],
            "mode: built-in\ninterval: 1m0s\n",
            "warning: interval clamped: name=SYNC_INTERVAL requested=10s clamped_to=1m0s\n",
            1,
        ),
        (
            ["--max", "1h", "2h"],
            "mode: built-in\ninterval: 1h0m0s\n",
            "warning: interval clamped: name=interval requested=2h0m0s clamped_to=1h0m0s\n",
            1,
        ),
        (["--", "--5m"], "mode: built-in\ninterval: 6h0m0s\n", None, 1),
        (["9223372036854775807ns"], "mode: built-in\ninterval: 2562047h47m16.854776s\n", "", 0),
    ],
)
def test_cli_prints_mode_cadence_and_warnings(
    args: list[str], stdout: str, stderr: str | None, status: int
) -> None:
    """The CLI prints the mode, the Go-form cadence and each warning; 1 means a warning."""
    result = run_cli(*args)
    assert (stdout, status) == (result.stdout, result.returncode)
    if stderr is not None:
        assert stderr == result.stderr


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ([], "missing VALUE"),
        (["1h", "2h"], "one VALUE expected"),
        (["1h", "--bogus"], "unknown option '--bogus'"),
        (["1h", "--default"], "option --default needs a value"),
        (["1h", "--default", "0"], "default must be a positive duration"),
        (["1h", "--default", "6 hours"], 'default: time: unknown unit " hours"'),
        (["1h", "--min", "1d"], 'low bound: time: unknown unit "d"'),
        (["1h", "--zero-as-once=yes"], "unknown option '--zero-as-once=yes'"),
    ],
)
def test_cli_usage_errors_exit_2(args: list[str], error: str) -> None:
    """Bad arguments print the usage line and the error to stderr and exit 2."""
    out, err = io.StringIO(), io.StringIO()
    assert 2 == main(args, stdout=out, stderr=err)
    assert "" == out.getvalue()
    assert err.getvalue().startswith("usage: python -m sched_interval VALUE")
    assert error in err.getvalue()


def test_cli_usage_error_in_a_real_process() -> None:
    """The exit status 2 reaches the shell."""
    result = run_cli("1h", "--bogus")
    assert (2, "") == (result.returncode, result.stdout)
    assert "error: unknown option '--bogus'" in result.stderr


@pytest.mark.parametrize(
    ("args", "stdout"),
    [
        (["--name=JOB", "--default=1h", "--min=1s", "--max=2h", "30m"], "interval: 30m0s"),
        (["--", "-h"], "interval: 6h0m0s"),
        (["--zero-as-once", "--", "0"], "mode: once"),
        (["-5m", "--default", "1m"], "interval: 1m0s"),
        (["--min", "0", "--max", "-1h", "1ns"], "interval: 1µs"),
    ],
)
def test_cli_option_forms(args: list[str], stdout: str) -> None:
    """--opt=value and --opt value both work; after -- everything is the value."""
    out, err = io.StringIO(), io.StringIO()
    main(args, stdout=out, stderr=err)
    assert stdout in out.getvalue()


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_cli_help(flag: str) -> None:
    """--help documents every option and the exit codes, and exits 0."""
    out = io.StringIO()
    assert 0 == main(["1h", flag], stdout=out)
    for word in ("--default", "--zero-as-once", "--min", "--max", "--name", "exit status"):
        assert word in out.getvalue()


def test_cli_help_in_a_real_process() -> None:
    """python -m sched_interval --help prints the help and exits 0."""
    result = run_cli("--help")
    assert (0, "") == (result.returncode, result.stderr)
    assert result.stdout.startswith("usage: python -m sched_interval VALUE")


def test_cli_undecodable_argument() -> None:
    """An argument of invalid UTF-8 bytes is checked like any other value, and prints safely."""
    result = subprocess.run(
        [sys.executable, "-m", "sched_interval", b"\xff30m", "--name", "X"],
        capture_output=True,
        env={"PYTHONIOENCODING": "utf-8", "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=False,
    )
    assert 1 == result.returncode
    assert (
        b"warning: cannot parse interval, using default: name=X value='\\udcff30m'"
        b" default=6h0m0s\n" == result.stderr
    )


def test_main_in_process_writes_to_the_given_streams() -> None:
    """main() can be called with argv and streams, as a console script or a test would."""
    out, err = io.StringIO(), io.StringIO()
    status = main(["-1h", "--zero-as-once", "--default", "90s"], stdout=out, stderr=err)
    assert (1, "mode: built-in\ninterval: 1m30s\n") == (status, out.getvalue())
    assert (
        "warning: interval is negative, using default: name=interval value='-1h' default=1m30s\n"
        == err.getvalue()
    )
