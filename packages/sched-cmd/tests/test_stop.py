"""Graceful stops with real processes and real signals: SIGTERM, the grace, SIGKILL."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sched_cmd_testkit import (
    DEADLINE,
    READY,
    SLEEP,
    TERM_EXITS,
    TERM_IGNORED,
    Report,
    alive,
    child,
    kill_quietly,
    on_ready,
    report,
)

import sched_cmd
from sched_cmd import run


def _stop_when_ready(pipe: Report) -> threading.Event:
    stop = threading.Event()
    on_ready(pipe, lambda _pid: stop.set())
    return stop


def test_child_that_exits_on_sigterm_gets_sigterm_not_sigkill() -> None:
    """A stop sends SIGTERM; a child that exits on it is never SIGKILLed."""
    with report() as pipe:
        stop = _stop_when_ready(pipe)
        result = run(
            child(pipe, TERM_EXITS, READY, SLEEP),
            stop=stop,
            grace=DEADLINE,
            pass_fds=[pipe.write_fd],
        )
        assert ["got SIGTERM"] == pipe.rest()
    assert -signal.SIGTERM == result.returncode


def test_child_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    """A child that traps SIGTERM and carries on gets SIGKILL once the grace is over."""
    grace = timedelta(milliseconds=300)
    with report() as pipe:
        stop = _stop_when_ready(pipe)
        started = time.monotonic()
        result = run(
            child(pipe, TERM_IGNORED, READY, SLEEP),
            stop=stop,
            grace=grace,
            pass_fds=[pipe.write_fd],
        )
        elapsed = time.monotonic() - started
        assert ["got SIGTERM"] == pipe.rest()
    assert -signal.SIGKILL == result.returncode
    assert grace.total_seconds() <= elapsed < DEADLINE


def test_stopped_run_returns_negative_returncode_and_check_raises() -> None:
    """A stopped run returns -SIGTERM with its output; check=True raises CalledProcessError."""
    with report() as pipe:
        stop = _stop_when_ready(pipe)
        with pytest.raises(subprocess.CalledProcessError) as caught:
            run(
                child(pipe, 'print("partial")\n', READY, SLEEP),
                stop=stop,
                check=True,
                capture_output=True,
                text=True,
                pass_fds=[pipe.write_fd],
            )
    assert -signal.SIGTERM == caught.value.returncode
    assert "partial\n" == caught.value.stdout


def test_stop_set_before_the_call_starts_no_child(tmp_path: Path) -> None:
    """With stop already set, no child starts and the result is an immediate stop."""
    marker = tmp_path / "started"
    stop = threading.Event()
    stop.set()
    result = run(["touch", str(marker)], stop=stop, capture_output=True, text=True)
    assert (-signal.SIGTERM, "", "") == (result.returncode, result.stdout, result.stderr)
    assert not marker.exists()
    with pytest.raises(subprocess.CalledProcessError):
        run(["touch", str(marker)], stop=stop, check=True)
    assert not marker.exists()


def test_stop_event_is_reusable_after_clear() -> None:
    """A stop event that was set and cleared stops a later run again."""
    stop = threading.Event()
    for _ in range(2):
        with report() as pipe:
            stop.clear()
            on_ready(pipe, lambda _pid: stop.set())
            result = run(child(pipe, TERM_EXITS, READY, SLEEP), stop=stop, pass_fds=[pipe.write_fd])
            assert ["got SIGTERM"] == pipe.rest()
        assert -signal.SIGTERM == result.returncode
    stop.clear()
    assert 0 == run(["true"], stop=stop).returncode


def test_one_stop_event_stops_concurrent_runs() -> None:
    """Several runs sharing one stop event all get SIGTERM when it is set."""
    stop = threading.Event()
    pipes = [Report() for _ in range(3)]
    results: list[int] = []
    try:
        threads = [
            threading.Thread(
                target=lambda p=pipe: results.append(
                    run(
                        child(p, TERM_EXITS, READY, SLEEP), stop=stop, pass_fds=[p.write_fd]
                    ).returncode
                )
            )
            for pipe in pipes
        ]
        for thread in threads:
            thread.start()
        for pipe in pipes:
            pipe.ready_pid()
        stop.set()
        for thread in threads:
            thread.join(DEADLINE)
        assert [["got SIGTERM"]] * 3 == [pipe.rest() for pipe in pipes], results
    finally:
        for pipe in pipes:
            pipe.close()
    assert [-signal.SIGTERM] * 3 == results


def test_timeout_stops_gracefully_and_raises_with_partial_output() -> None:
    """A timeout sends SIGTERM, reaps, then raises TimeoutExpired with the output so far.

    The output is written by the forked child before it executes the command
    (``Popen`` returns only once the exec happened), so it is in the pipe before
    the timeout can start: no interpreter start-up races the timeout.
    """

    def write_partial() -> None:
        os.write(1, b"partial\n")

    with pytest.raises(subprocess.TimeoutExpired) as caught:
        run(
            ["sleep", "3600"],
            timeout=timedelta(milliseconds=200),
            capture_output=True,
            text=True,
            preexec_fn=write_partial,
        )
    error: Any = caught.value  # typeshed types the output as bytes; text mode gives str
    assert (0.2, "partial\n", "") == (error.timeout, error.stdout, error.stderr)


def _ready_lines_then(pipe: Report, count: int, action: Callable[[], None]) -> None:
    def wait() -> None:
        for _ in range(count):
            pipe.ready_pid()
        action()

    threading.Thread(target=wait, daemon=True).start()


def test_kill_group_leaves_no_survivor_after_a_stop() -> None:
    """With kill_group a stop reaches the grandchildren; one ignoring SIGTERM gets SIGKILL."""
    with report() as pipe:
        grandchildren = [
            child(pipe, behaviour, READY, SLEEP) for behaviour in (TERM_EXITS, TERM_IGNORED)
        ]
        code = child(
            pipe,
            TERM_EXITS,
            f"""
            import subprocess
            for argv in {grandchildren!r}:
                subprocess.Popen(argv, pass_fds=[REPORT])
            """,
            READY,
            SLEEP,
        )
        stop = threading.Event()
        _ready_lines_then(pipe, 3, stop.set)
        result = run(code, stop=stop, grace=0.3, kill_group=True, pass_fds=[pipe.write_fd])
        # rest() reads to EOF: it returns only once every holder of the pipe is dead.
        assert ["got SIGTERM"] * 3 == pipe.rest()
    assert -signal.SIGTERM == result.returncode


def test_kill_group_sweeps_members_left_behind_by_a_child_that_exits() -> None:
    """With kill_group, a child exiting by itself leaves no stray: its group gets SIGTERM."""
    with report() as pipe:
        grandchild = child(pipe, TERM_EXITS, "print(os.getpid(), flush=True)\n", SLEEP)
        code = child(
            pipe,
            f"""
            import subprocess
            stray = subprocess.Popen({grandchild!r}, pass_fds=[REPORT], stdout=subprocess.PIPE)
            say("stray " + stray.stdout.readline().decode().strip())
            """,
        )
        result = run(code, grace=DEADLINE, kill_group=True, pass_fds=[pipe.write_fd])
        stray, got = pipe.rest()
    stray_pid = int(stray.split()[1])
    assert 0 == result.returncode
    assert "got SIGTERM" == got
    assert not alive(stray_pid)


def test_grandchild_holding_the_output_pipe_does_not_hang_past_the_grace() -> None:
    """Once the child exited, waiting for its pipes is bounded by the grace (Go's WaitDelay)."""
    with report() as pipe:
        code = child(
            pipe,
            """
            import subprocess
            # sleep-ok: the stray only has to outlive the test; it is killed, never awaited
            stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
            say(f"stray {stray.pid}")
            print("child done")
            """,
        )
        started = time.monotonic()
        result = run(code, grace=0.3, capture_output=True, pass_fds=[pipe.write_fd])
        elapsed = time.monotonic() - started
        (stray,) = pipe.rest()
    stray_pid = int(stray.split()[1])
    try:
        assert alive(stray_pid)  # it still holds the pipe: the cut is what ended the wait
        assert (0, b"child done\n", b"") == (result.returncode, result.stdout, result.stderr)
        assert elapsed < DEADLINE
    finally:
        kill_quietly(stray_pid)


class _Collect(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__()
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_logs_the_sigkill_escalation_with_structured_fields() -> None:
    """The SIGKILL escalation is a warning naming the pid, with sched_ extra fields."""
    records: list[logging.LogRecord] = []
    logger = logging.getLogger("test_sched_cmd_escalation")
    handler = _Collect(records)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with report() as pipe:
            stop = _stop_when_ready(pipe)
            result = run(
                child(pipe, TERM_IGNORED, READY, SLEEP),
                stop=stop,
                grace=0.1,
                logger=logger,
                pass_fds=[pipe.write_fd],
            )
    finally:
        logger.removeHandler(handler)
    kills = [r for r in records if getattr(r, "sched_signal", None) == "SIGKILL"]
    assert 1 == len(kills)
    assert logging.WARNING == kills[0].levelno
    assert -signal.SIGKILL == result.returncode
    assert f"pid {kills[0].sched_pid}" in kills[0].getMessage()  # type: ignore[attr-defined]
    assert "100ms" == kills[0].sched_grace  # type: ignore[attr-defined]


@pytest.mark.parametrize("kill_group", [False, True])
def test_a_line_carries_sched_pgid_only_for_a_group(kill_group: bool) -> None:
    """``sched_pgid`` is the group's id on a ``kill_group`` run's lines and absent
    otherwise (a ``key=value`` formatter showed ``sched_pgid=None``)."""
    records: list[logging.LogRecord] = []
    logger = logging.getLogger(f"test_sched_cmd_pgid_{kill_group}")
    handler = _Collect(records)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        with report() as pipe:
            stop = _stop_when_ready(pipe)
            result = run(
                child(pipe, TERM_EXITS, READY, SLEEP),
                stop=stop,
                grace=DEADLINE,
                kill_group=kill_group,
                logger=logger,
                pass_fds=[pipe.write_fd],
            )
    finally:
        logger.removeHandler(handler)
    assert -signal.SIGTERM == result.returncode
    assert records, "the stop logs its SIGTERM line"
    pid = records[0].sched_pid  # type: ignore[attr-defined]
    expected = [pid if kill_group else "absent"] * len(records)
    assert expected == [getattr(r, "sched_pgid", "absent") for r in records]


def test_non_positive_grace_uses_the_default() -> None:
    """grace <= 0 means DEFAULT_GRACE (5 s), as the Go library's NewCommandRunner does."""
    assert timedelta(seconds=5) == sched_cmd.DEFAULT_GRACE
    assert sched_cmd.DEFAULT_GRACE == sched_cmd.command_runner(0).grace  # type: ignore[attr-defined]
    assert sched_cmd.DEFAULT_GRACE == sched_cmd.command_runner(-1.5).grace  # type: ignore[attr-defined]


def test_timeout_while_a_grandchild_holds_the_pipes_raises_after_the_grace() -> None:
    """A child that exited leaving its pipes held open still times out, bounded by the grace.

    The forked child starts the stray and writes its output before it executes
    ``true`` (``Popen`` returns only once the exec happened), so both happen
    before the timeout can start: no interpreter start-up races the timeout.
    """
    strays: list[int] = []
    with report() as pipe:

        def start_stray_and_write() -> None:
            # sleep-ok: the stray only has to outlive the test; it is killed, never awaited
            stray = os.posix_spawnp("sleep", ["sleep", "3600"], os.environ)
            os.write(pipe.write_fd, f"stray {stray}\n".encode())
            os.write(1, b"child done\n")

        try:
            with pytest.raises(subprocess.TimeoutExpired) as caught:
                run(
                    ["true"],
                    timeout=0.5,
                    grace=1.5,
                    capture_output=True,
                    preexec_fn=start_stray_and_write,
                )
        finally:
            strays = [int(line.split()[1]) for line in pipe.rest()]
            for pid in strays:
                kill_quietly(pid)
    assert 1 == len(strays)
    assert b"child done\n" == caught.value.stdout
