"""The sched-trigger console script: lifecycle on stderr, exit status per outcome."""

from __future__ import annotations

import contextlib
import errno
import inspect
import io
import json
import os
import pwd
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sched_trigger_testkit import (
    DEADLINE,
    Payload,
    RawServer,
    foreign_server,
    received,
    socket_dir,
)

from sched_trigger import Outcome, Server, run_broker_in_thread
from sched_trigger.__main__ import format_ms, main, parse_timeout
from sched_trigger._wire import MAX_REQUEST_SIZE

QUEUED = b'{"event":"queued","ok":false}\n'


def in_a_child(*args: str, **options: Any) -> subprocess.CompletedProcess[str]:
    """Run ``python -m sched_trigger ARGS`` in a child, as an operator's docker exec would
    (*options* go to `subprocess.run`: ``input``, ``stdin``, ``cwd``, ...)."""
    return subprocess.run(
        [sys.executable, "-m", "sched_trigger", *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
        **options,
    )


def in_this_process(
    *args: str, input: str | None = None, stdin: int | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``main(ARGS)`` here, standard streams redirected, as `in_a_child` runs the
    console script (the same options, but ``env``)."""
    source = (
        io.TextIOWrapper(io.BytesIO((input or "").encode()))
        if stdin is None
        else open(stdin, closefd=False)  # noqa: SIM115 - closed below
    )
    out, err = io.StringIO(), io.StringIO()
    here = Path.cwd()
    saved = sys.stdin
    try:
        if cwd is not None:
            os.chdir(cwd)
        sys.stdin = source
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(list(args))
    finally:
        sys.stdin = saved
        os.chdir(here)
        source.close()
    return subprocess.CompletedProcess(list(args), status, out.getvalue(), err.getvalue())


Cli = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(params=["child", "main"])
def cli(request: pytest.FixtureRequest) -> Cli:
    """The console script, run both ways: ``python -m sched_trigger`` in a child, and
    `main` in this process (the two must agree; only the second counts for coverage)."""
    return in_a_child if request.param == "child" else in_this_process


def run(stop: threading.Event, trigger: str, payload: Payload) -> Outcome:
    if payload.note == "fail":
        return Outcome(False, "exit status 3", 1.5)
    if payload.note == "block":
        BLOCKING.set()
        assert RELEASE.wait(DEADLINE)
    return Outcome(True, "", 0.012)


BLOCKING = threading.Event()
RELEASE = threading.Event()


def test_success_failure_and_rejection_exit_codes(cli: Cli) -> None:
    """0 when the run succeeds, 1 when it fails or is rejected; lifecycle on stderr."""
    BLOCKING.clear()  # the handshakes of this run, not of the other parametrization's
    RELEASE.clear()
    with socket_dir() as tmp:
        path = str(Path(tmp) / "d.sock")
        with run_broker_in_thread(path, run, capacity=0, payload_type=Payload):
            ok = cli(path, '{"repos": ["a"]}')
            failed = cli(path, '{"note": "fail"}')
            blocker = subprocess.Popen(
                [sys.executable, "-m", "sched_trigger", path, '{"note": "block"}'],
                stderr=subprocess.DEVNULL,
            )
            try:
                assert BLOCKING.wait(DEADLINE)
                rejected = cli(path)
            finally:
                RELEASE.set()
                assert 0 == blocker.wait(DEADLINE)
    assert (0, "") == (ok.returncode, ok.stdout)
    assert [
        "sched-trigger: queued",
        "sched-trigger: started",
        "sched-trigger: done: ok in 12ms",
    ] == ok.stderr.splitlines()
    assert 1 == failed.returncode
    assert "sched-trigger: done: failed after 1.5s: exit status 3" == failed.stderr.splitlines()[-1]
    assert 1 == rejected.returncode
    assert ["sched-trigger: rejected: run queue is full"] == rejected.stderr.splitlines()


@pytest.mark.parametrize(
    "args", [["{missing}"], ["{missing}", "{not json"], [], ["a", "b", "c"]], ids=str
)
def test_unreachable_and_usage_errors_exit_2(args: list[str], cli: Cli) -> None:
    """An unreachable daemon, an invalid payload or wrong arguments exit 2."""
    with socket_dir() as tmp:
        done = cli(*[a.replace("{missing}", str(Path(tmp) / "nope")) for a in args])
    assert 2 == done.returncode
    assert done.stderr


def test_a_nested_event_line_exits_3_without_a_traceback(cli: Cli) -> None:
    """A daemon that sends a deeply nested line gets the protocol error's exit status."""
    with socket_dir() as tmp:
        server = RawServer(str(Path(tmp) / "s"), [QUEUED, b"[" * 60_000 + b"\n"])
        try:
            done = cli(server.path)
        finally:
            server.close()
    assert 3 == done.returncode
    assert "Traceback" not in done.stderr
    assert "connection lost mid-run" in done.stderr


def test_connection_lost_mid_run_exits_3(cli: Cli) -> None:
    """A daemon that dies after queueing the request: exit 3."""
    with socket_dir() as tmp:
        server = RawServer(str(Path(tmp) / "s"), [QUEUED])
        try:
            done = cli(server.path, "{}")
        finally:
            server.close()
    assert 3 == done.returncode
    assert "connection lost mid-run" in done.stderr


def test_ctrl_c_exits_130_and_closes_the_connection() -> None:
    """SIGINT while waiting: the connection is closed (the daemon sees it), exit 130."""
    with socket_dir() as tmp:
        server = RawServer(str(Path(tmp) / "s"), [QUEUED], hang_up=False)
        child = subprocess.Popen(
            [sys.executable, "-u", "-m", "sched_trigger", server.path],
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stderr is not None
            ready, _, _ = select.select([child.stderr], [], [], DEADLINE)
            assert ready
            assert "sched-trigger: queued\n" == child.stderr.readline()
            child.send_signal(signal.SIGINT)
            assert 130 == child.wait(DEADLINE)
            assert server.client_left.wait(DEADLINE)
        finally:
            if child.poll() is None:
                child.kill()
            child.wait(DEADLINE)
            if child.stderr is not None:
                child.stderr.close()
            server.close()


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    """--help prints the usage and the exit statuses."""
    assert 0 == main(["--help"])
    assert "usage: sched-trigger [--timeout DURATION] [--owner USER] SOCKET [PAYLOAD_JSON | -]" in (
        capsys.readouterr().out
    )


def test_console_script_is_installed() -> None:
    """The sched-trigger entry point sits next to the interpreter and runs main."""
    script = Path(sys.executable).parent / "sched-trigger"
    if not script.exists():
        pytest.skip("the package is not installed with its scripts here")
    done = subprocess.run(
        [str(script), "--help"], capture_output=True, text=True, timeout=DEADLINE, check=False
    )
    assert 0 == done.returncode
    assert done.stdout.startswith("usage:")


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0s"),
        (1, "1ms"),
        (999, "999ms"),
        (1000, "1s"),
        (1500, "1.5s"),
        (1234, "1.234s"),
        (60_000, "1m0s"),
        (61_010, "1m1.01s"),
        (3_600_000, "1h0m0s"),
        (3_723_400, "1h2m3.4s"),
        (-1500, "-1.5s"),
    ],
)
def test_durations_print_as_go_does(ms: int, text: str) -> None:
    """Durations on stderr use Go's Duration.String form."""
    assert text == format_ms(ms)


def test_python_dash_m_matches_the_main_function() -> None:
    """python -m sched_trigger is the same command (environment without a daemon)."""
    env = dict(os.environ)
    done = in_a_child("--help", env=env)
    assert 0 == done.returncode
    assert "exit status" in done.stdout


def test_the_payload_can_come_from_stdin(cli: Cli) -> None:
    """``-`` reads the payload from stdin: no argument-size limit, nothing in
    /proc/PID/cmdline (a 1 MB payload as an argument fails with E2BIG)."""
    secret = "s3cr3t-" + "x" * 1_000_000
    with socket_dir() as tmp:
        path = str(Path(tmp) / "d.sock")
        with run_broker_in_thread(path, run, payload_type=Payload):
            done = cli(path, "-", input=json.dumps({"repos": [secret]}))
            bad = cli(path, "-", input="{not json")
    assert 0 == done.returncode, done.stderr
    assert 2 == bad.returncode
    assert "standard input is not valid JSON" in bad.stderr


def test_timeout_option_bounds_the_wait(cli: Cli) -> None:
    """--timeout takes seconds or a Go duration; when it passes the CLI exits 3."""
    with socket_dir() as tmp:
        server = RawServer(str(Path(tmp) / "s"), [QUEUED], hang_up=False)
        try:
            done = cli("--timeout", "50ms", server.path)
            assert server.client_left.wait(DEADLINE)
        finally:
            server.close()
    assert 3 == done.returncode
    assert "timed out" in done.stderr
    for bad in ("soon", "-1s", "1d"):
        assert 2 == cli("--timeout", bad, "/nowhere").returncode


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 30.0), ("2.5", 2.5), ("90s", 90.0), ("1m30s", 90.0), ("500ms", 0.5), ("1h", 3600.0)],
)
def test_timeout_values(text: str, seconds: float) -> None:
    """The --timeout grammar: a number of seconds or a Go duration."""
    assert seconds == parse_timeout(text)


@pytest.mark.parametrize("kind", ["file", "long"])
def test_not_a_socket_and_too_long_paths_are_named(kind: str, cli: Cli) -> None:
    """The CLI says 'not a socket' or 'over the 107-byte limit', exit 2."""
    with socket_dir() as tmp:
        path = Path(tmp) / "s"
        path.write_text("")
        target = str(path) if kind == "file" else "/tmp/" + "x" * 120
        done = cli(target)
    assert 2 == done.returncode
    assert ("not a socket" if kind == "file" else "-byte limit") in done.stderr
    assert "Errno None" not in done.stderr


STALL_IMPORT = """
import sys, time

STALL_ON = sys.argv[1]

class Stall:  # a slow disk, at the worst moment: inside one of the CLI's imports
    def find_spec(self, name, path=None, target=None):
        if name == STALL_ON:
            print("stalled", flush=True)
            # sleep-ok: the import hook stalls start-up until the test interrupts it
            time.sleep(60)
        return None

sys.meta_path.insert(0, Stall())
sys.argv[1:] = sys.argv[2:]
from sched_trigger.__main__ import main  # what the console script does
sys.exit(main())
"""


@pytest.mark.parametrize("module", ["socket", "json", "sched_trigger._client"])
def test_ctrl_c_during_start_up_prints_no_traceback(module: str) -> None:
    """SIGINT while the CLI is still importing: exit 130 with one line, no traceback."""
    child = subprocess.Popen(
        [sys.executable, "-u", "-c", STALL_IMPORT, module, "/nowhere.sock"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert "stalled" == child.stdout.readline().strip()
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=DEADLINE)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert "Traceback" not in stderr
    assert 130 == child.returncode


def test_no_arguments_says_what_is_missing(cli: Cli) -> None:
    """``sched-trigger`` alone says the SOCKET argument is missing before the usage, exit 2."""
    done = cli()
    assert 2 == done.returncode
    first, *rest = done.stderr.splitlines()
    assert "sched-trigger: missing SOCKET, the daemon's socket path" == first
    assert rest[0].startswith("usage: sched-trigger")


def test_too_many_arguments_says_so(cli: Cli) -> None:
    """A third argument is named as the problem, exit 2."""
    done = cli("a.sock", "{}", "extra")
    assert 2 == done.returncode
    assert "sched-trigger: unexpected argument 'extra'" == done.stderr.splitlines()[0]


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("source", ["argument", "stdin"])
def test_a_deeply_nested_payload_exits_2_without_a_traceback(source: str, cli: Cli) -> None:
    """A payload nested deeper than Python's json reads (5,000 levels broke 3.11 and 3.12;
    20,000 is past every version, and past Go's 10,000) is refused with exit 2 and one
    line (it was an uncaught RecursionError: a traceback and exit 1)."""
    with socket_dir() as tmp:
        path = str(Path(tmp) / "nowhere.sock")
        deep = _deep(20_000)
        done = cli(path, deep) if source == "argument" else cli(path, "-", input=deep)
    assert 2 == done.returncode
    assert "Traceback" not in done.stderr
    assert "nests too deeply" in done.stderr


def test_stdin_is_read_no_further_than_the_request_cap() -> None:
    """Standard input over the 8 MiB request cap is refused after reading just past the cap
    (exit 2); the CLI used to read all of it (200 MB in, 254 MB resident)."""
    cap = 8 * 1024 * 1024
    chunk = b" " * 65536
    written = 0
    with socket_dir() as tmp:
        child = subprocess.Popen(
            [sys.executable, "-m", "sched_trigger", str(Path(tmp) / "nowhere.sock"), "-"],
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert child.stdin is not None
            try:
                while written < 8 * cap:  # far more than the CLI may read
                    child.stdin.write(chunk)
                    written += len(chunk)
                child.stdin.close()
            except BrokenPipeError:
                pass  # the CLI stopped reading and exited: what this test wants
            _, stderr = child.communicate(timeout=DEADLINE)
        finally:
            if child.poll() is None:
                child.kill()
            child.wait(DEADLINE)
    assert 2 == child.returncode
    assert b"standard input is over the 8 MiB request cap" in stderr
    assert written < 2 * cap  # what it read, plus what the pipe and our buffer held


def test_an_unreadable_stdin_exits_2(cli: Cli) -> None:
    """Standard input that cannot be read (the write end of a pipe) is reported on one line,
    exit 2."""
    read_end, write_end = os.pipe()
    try:
        done = cli("/nowhere.sock", "-", stdin=write_end)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert 2 == done.returncode
    assert "Traceback" not in done.stderr
    assert "cannot read standard input: Bad file descriptor" in done.stderr


def test_a_path_that_is_not_a_socket_is_named_as_given(tmp_path: Path, cli: Cli) -> None:
    """The client names a non-socket with the one wording the daemon's listen uses, and the
    path exactly as the user typed it."""
    (tmp_path / "notes.txt").write_text("")
    done = cli("notes.txt", cwd=tmp_path)
    assert 2 == done.returncode
    expected = (
        f"sched-trigger: daemon unreachable: [Errno {errno.ENOTSOCK}] exists and is not a "
        "socket: 'notes.txt'"
    )
    assert [expected] == done.stderr.splitlines()


def test_a_socket_of_another_user_gets_nothing_from_stdin(cli: Cli) -> None:
    """A socket served by another user receives none of standard input's payload (exit 2,
    saying whose it is); ``--owner nobody`` sends it on purpose."""
    with socket_dir() as tmp, foreign_server(tmp) as (path, child):
        refused = cli(path, "-", input='{"token": "s3cr3t"}')
        assert b"" == received(child)
    assert 2 == refused.returncode
    nobody = pwd.getpwnam("nobody").pw_uid
    assert f"runs as uid {nobody}" in refused.stderr
    assert "nothing was sent" in refused.stderr
    with socket_dir() as tmp, foreign_server(tmp) as (path, child):
        trusted = cli("--owner", "nobody", path, '{"n": 1}')
        assert b'{"n":1}\n' == received(child)
    assert 0 == trusted.returncode, trusted.stderr


def test_owner_takes_a_uid_or_a_user_name(cli: Cli) -> None:
    """--owner takes a number or a user name; an unknown name exits 2 saying so."""
    done = cli("--owner", "no-such-user-r3", "/nowhere.sock")
    assert 2 == done.returncode
    assert "unknown user 'no-such-user-r3'" in done.stderr


def test_the_stdin_cap_is_the_daemons_default_request_cap() -> None:
    """The CLI reads as much standard input as a daemon takes by default, no more."""
    default = inspect.signature(Server).parameters["max_request_size"].default
    assert default == MAX_REQUEST_SIZE


def test_a_closed_stderr_still_gives_the_exit_status() -> None:
    """With standard error closed (``2>&-``) the CLI has nowhere to say why, but still exits
    with the documented status instead of crashing with 1."""
    done = subprocess.run(
        [
            "/bin/sh",
            "-c",
            '"$0" -m sched_trigger /nowhere.sock 2>&-; echo "exit $?"',
            sys.executable,
        ],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert "exit 2" == done.stdout.strip()
