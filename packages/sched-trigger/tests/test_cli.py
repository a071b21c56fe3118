"""The sched-trigger console script: lifecycle on stderr, exit status per outcome."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sched_trigger_testkit import DEADLINE, Payload, RawServer, socket_dir

from sched_trigger import Outcome, run_broker_in_thread
from sched_trigger.__main__ import format_ms, main, parse_timeout

QUEUED = b'{"event":"queued","ok":false}\n'


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m sched_trigger ARGS`` in a child, as an operator's docker exec would."""
    return subprocess.run(
        [sys.executable, "-m", "sched_trigger", *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )


def run(stop: threading.Event, trigger: str, payload: Payload) -> Outcome:
    if payload.note == "fail":
        return Outcome(False, "exit status 3", 1.5)
    if payload.note == "block":
        BLOCKING.set()
        assert RELEASE.wait(DEADLINE)
    return Outcome(True, "", 0.012)


BLOCKING = threading.Event()
RELEASE = threading.Event()


def test_success_failure_and_rejection_exit_codes() -> None:
    """0 when the run succeeds, 1 when it fails or is rejected; lifecycle on stderr."""
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
def test_unreachable_and_usage_errors_exit_2(args: list[str]) -> None:
    """An unreachable daemon, an invalid payload or wrong arguments exit 2."""
    with socket_dir() as tmp:
        done = cli(*[a.replace("{missing}", str(Path(tmp) / "nope")) for a in args])
    assert 2 == done.returncode
    assert done.stderr


def test_a_nested_event_line_exits_3_without_a_traceback() -> None:
    """A daemon that sends a deeply nested line gets the protocol error's exit status."""
    with socket_dir() as tmp:
        server = RawServer(str(Path(tmp) / "s"), [QUEUED, b"[" * 500_000 + b"\n"])
        try:
            done = cli(server.path)
        finally:
            server.close()
    assert 3 == done.returncode
    assert "Traceback" not in done.stderr
    assert "connection lost mid-run" in done.stderr


def test_connection_lost_mid_run_exits_3() -> None:
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
    assert "usage: sched-trigger [--timeout DURATION] SOCKET [PAYLOAD_JSON | -]" in (
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
    done = subprocess.run(
        [sys.executable, "-m", "sched_trigger", "--help"],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
        env=env,
    )
    assert 0 == done.returncode
    assert "exit status" in done.stdout


def test_the_payload_can_come_from_stdin() -> None:
    """``-`` reads the payload from stdin: no argument-size limit, nothing in
    /proc/PID/cmdline (a 1 MB payload as an argument fails with E2BIG)."""
    secret = "s3cr3t-" + "x" * 1_000_000
    with socket_dir() as tmp:
        path = str(Path(tmp) / "d.sock")
        with run_broker_in_thread(path, run, payload_type=Payload):
            done = subprocess.run(
                [sys.executable, "-m", "sched_trigger", path, "-"],
                input=json.dumps({"repos": [secret]}),
                capture_output=True,
                text=True,
                timeout=DEADLINE,
                check=False,
            )
            bad = subprocess.run(
                [sys.executable, "-m", "sched_trigger", path, "-"],
                input="{not json",
                capture_output=True,
                text=True,
                timeout=DEADLINE,
                check=False,
            )
    assert 0 == done.returncode, done.stderr
    assert 2 == bad.returncode
    assert "standard input is not valid JSON" in bad.stderr


def test_timeout_option_bounds_the_wait() -> None:
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
def test_not_a_socket_and_too_long_paths_are_named(kind: str) -> None:
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
