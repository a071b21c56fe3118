"""kill_group: what the process group covers, what escapes it, and the run's report of it."""

from __future__ import annotations

import signal
import subprocess
import threading

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

from sched_cmd import CompletedRun, GroupReport, run

SAY_GROUP = 'say(f"group {os.getpid()} {os.getpgrp()}")\n'


def _stray(pipe: Report, behaviour: str) -> list[str]:
    """A grandchild that prints its pid on stdout once its SIGTERM handling is in place."""
    return child(pipe, behaviour, "print(os.getpid(), flush=True)\n", SLEEP)


def _spawn(argv: list[str], *, setsid: bool = False) -> str:
    """Child code starting *argv* (in a new session with *setsid*); it says ``stray <pid>``
    once the grandchild is ready, so a signal cannot beat its handler."""
    return f"""
    import subprocess
    stray = subprocess.Popen(
        {argv!r}, pass_fds=[REPORT], stdout=subprocess.PIPE, start_new_session={setsid!r}
    )
    say("stray " + stray.stdout.readline().decode().strip())
    """


def test_a_clean_kill_group_run_reports_its_group_and_no_signal() -> None:
    """The report names the group (the child's pid) and says nothing had to be sent."""
    with report() as pipe:
        result = run(child(pipe, SAY_GROUP), kill_group=True, pass_fds=[pipe.write_fd])
        (line,) = pipe.rest()
    _, pid, pgid = line.split()
    assert pid == pgid
    assert isinstance(result, subprocess.CompletedProcess)
    assert GroupReport(int(pgid), survivors=False, signals=()) == result.group


def test_survivors_that_stop_on_sigterm_are_reported_with_sigterm() -> None:
    """A member left behind by a child that exits is a survivor, swept with SIGTERM."""
    with report() as pipe:
        code = child(pipe, SAY_GROUP, _spawn(_stray(pipe, TERM_EXITS)))
        result = run(code, grace=DEADLINE, kill_group=True, pass_fds=[pipe.write_fd])
        group, stray, got = pipe.rest()
    assert "got SIGTERM" == got
    assert not alive(int(stray.split()[1]))  # run waited for the group to empty
    expected = GroupReport(int(group.split()[2]), survivors=True, signals=(signal.SIGTERM,))
    assert (0, expected) == (result.returncode, result.group)


def test_survivors_that_ignore_sigterm_are_reported_with_sigkill() -> None:
    """A member that outlives SIGTERM by the grace gets SIGKILL, and the report says so."""
    with report() as pipe:
        code = child(pipe, SAY_GROUP, _spawn(_stray(pipe, TERM_IGNORED)))
        result = run(code, grace=0.2, kill_group=True, pass_fds=[pipe.write_fd])
        # rest() reads to EOF: it returns once the SIGKILLed stray is gone.
        group, _, got = pipe.rest()
    assert "got SIGTERM" == got
    signals = (signal.SIGTERM, signal.SIGKILL)
    assert GroupReport(int(group.split()[2]), survivors=True, signals=signals) == result.group


def test_a_stopped_group_reports_the_sigterm_of_the_stop() -> None:
    """A stop sends SIGTERM to the whole group; a group that obeys needs nothing more."""
    with report() as pipe:
        code = child(pipe, TERM_EXITS, READY, SAY_GROUP, SLEEP)
        stop = threading.Event()
        on_ready(pipe, lambda _pid: stop.set())
        result = run(code, stop=stop, kill_group=True, pass_fds=[pipe.write_fd])
        lines = pipe.rest()
    assert result.group is not None
    assert (int(lines[0].split()[2]), (signal.SIGTERM,)) == (
        result.group.pgid,
        result.group.signals,
    )
    assert -signal.SIGTERM == result.returncode


def test_a_descendant_that_calls_setsid_escapes_the_group_and_outlives_the_run() -> None:
    """setsid() leaves the group: neither the stop nor the sweep reaches it (documented)."""
    with report() as pipe:
        escapee = _stray(pipe, TERM_EXITS)
        code = child(pipe, TERM_EXITS, _spawn(escapee, setsid=True), READY, SLEEP)
        stop = threading.Event()
        strays: list[int] = []

        def stop_when_ready() -> None:
            strays.append(int(pipe.line().split()[1]))
            pipe.ready_pid()
            stop.set()

        waiter = threading.Thread(target=stop_when_ready, daemon=True)
        waiter.start()
        try:
            result = run(code, stop=stop, grace=0.2, kill_group=True, pass_fds=[pipe.write_fd])
            waiter.join(DEADLINE)
            assert alive(strays[0])  # it left the group: the stop never reached it
        finally:
            for pid in strays:
                kill_quietly(pid)
        assert ["got SIGTERM"] == pipe.rest()  # the child's own, never the escapee's
    assert result.group is not None
    assert (False, (signal.SIGTERM,)) == (result.group.survivors, result.group.signals)


def test_only_kill_group_runs_carry_a_report() -> None:
    """Without kill_group, or when no child started, the report is None."""
    assert run(["true"]).group is None
    stop = threading.Event()
    stop.set()
    assert run(["true"], stop=stop, kill_group=True).group is None


def test_completed_run_is_a_completed_process() -> None:
    """CompletedRun keeps CompletedProcess's contract; a fake runner builds one."""
    fake: CompletedRun[bytes] = CompletedRun(["rsync"], 0)
    assert isinstance(fake, subprocess.CompletedProcess)
    assert (["rsync"], 0) == (fake.args, fake.returncode)
    assert (None, None, None) == (vars(fake)["stdout"], vars(fake)["stderr"], fake.group)
    assert "CompletedRun(args=['rsync'], returncode=0)" == repr(fake)
    report_ = GroupReport(42, survivors=True, signals=(signal.SIGTERM, signal.SIGKILL))
    assert (
        "CompletedRun(args=['x'], returncode=-9, "
        "group=GroupReport(pgid=42, survivors=True, signals=(SIGTERM, SIGKILL)))"
        == repr(CompletedRun(["x"], -9, group=report_))
    )
    assert hash(report_) == hash(GroupReport(42, True, (signal.SIGTERM, signal.SIGKILL)))
    with pytest.raises(subprocess.CalledProcessError):
        CompletedRun(["false"], 1).check_returncode()
