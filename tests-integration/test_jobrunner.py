"""The example job runner (docs/examples/jobrunner.py), end to end, as real processes.

The runner's command is the ``work.py`` stand-in; when a test needs a run to
stay in flight it sets ``WORK_HOLD`` to a FIFO and releases the run through
it, after reading the line that proves the run started.
"""

from __future__ import annotations

import json
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import Children, Hold

ROOT = Path(__file__).resolve().parent.parent
JOBRUNNER = ROOT / "docs" / "examples" / "jobrunner.py"
DEADLINE = 30.0


def jobrunner(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the example job runner to completion, capturing its output."""
    return subprocess.run(
        [sys.executable, "-u", str(JOBRUNNER), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )


def trigger(socket: Path, payload: object, env: dict[str, str]) -> list[str]:
    """The ``sched-trigger`` console script (or ``python -m sched_trigger``) command line."""
    script = Path(sys.executable).with_name("sched-trigger")
    base = [str(script)] if script.exists() else [sys.executable, "-m", "sched_trigger"]
    return [*base, str(socket), json.dumps(payload)]


def test_once_mode_runs_one_cycle_and_exits(runner_env: dict[str, str]) -> None:
    """JOB_INTERVAL=0 selects once mode: one cycle with the real command, exit 0."""
    result = jobrunner("run", env={**runner_env, "JOB_INTERVAL": "0"})
    assert 0 == result.returncode, result.stderr
    assert "once mode: one cycle, then exit" in result.stderr
    assert "work: cycle 1 started" in result.stdout
    assert "work: cycle 1 finished" in result.stdout
    assert "cycle outcome: ran" in result.stderr
    assert "cycle 2" not in result.stderr


def test_once_mode_reports_a_failing_command(runner_env: dict[str, str]) -> None:
    """A command that exits non-zero fails the cycle: logged with its outcome, exit 1."""
    env = {**runner_env, "JOB_INTERVAL": "0", "JOB_COMMAND": "sh -c 'exit 3'"}
    result = jobrunner("run", env=env)
    assert 1 == result.returncode
    assert (
        "cycle failed: cycle run failed (outcome ran): CycleFailed: cycle 1: command exited "
        "with status 3 app_outcome=ran"
    ) in result.stderr


def test_an_unusable_state_directory_is_outcome_none(
    runner_env: dict[str, str], short_tmp: Path
) -> None:
    """A state directory that cannot be made (a file in its path, as with
    ``JOB_STATE_DIR=/etc/passwd/state``) is a failed cycle with outcome none, logged with
    the path and why, and exit 1: no traceback, for a poll and for the main process."""
    (short_tmp / "file").write_text("")
    state = short_tmp / "file" / "state"
    env = {**runner_env, "JOB_STATE_DIR": str(state), "JOB_INTERVAL": "0"}
    logged = (
        f"ERROR jobrunner: cycle failed: state directory unusable: [Errno 20] Not a directory: "
        f"{str(state)!r} app_outcome=none"
    )
    for command, printed in (("poll", "poll: none\n"), ("run", "")):
        result = jobrunner(command, env=env)
        assert (1, printed, 1) == (
            result.returncode,
            result.stdout,
            result.stderr.count(logged),
        ), result.stderr
        assert "Traceback" not in result.stderr


def test_a_real_command_from_job_command(runner_env: dict[str, str], short_tmp: Path) -> None:
    """JOB_COMMAND is split like a shell would and run as the cycle, with JOB_CYCLE set."""
    marker = short_tmp / "marker"
    command = f"sh -c 'echo cycle=$JOB_CYCLE > {shlex.quote(str(marker))}'"
    result = jobrunner("run", env={**runner_env, "JOB_INTERVAL": "0", "JOB_COMMAND": command})
    assert 0 == result.returncode, result.stderr
    assert "cycle=1\n" == marker.read_text()


def test_unparseable_interval_warns_and_uses_the_default(
    children: Children, runner_env: dict[str, str]
) -> None:
    """A typo in JOB_INTERVAL is logged with the variable's name, and the default cadence runs."""
    runner = children.jobrunner("run", env={**runner_env, "JOB_INTERVAL": "1d"})
    line = runner.expect(r"cannot parse interval, using default: name=JOB_INTERVAL").string
    assert "value='1d' default=6h0m0s" in line
    assert "sched_default=6h0m0s sched_name=JOB_INTERVAL sched_value=1d" in line
    runner.expect(r"built-in mode: a cycle now, then every 6h0m0s")
    runner.expect(r"cycle outcome: ran")
    runner.terminate()
    assert 0 == runner.wait()


def test_external_mode_idles_until_stopped(children: Children, runner_env: dict[str, str]) -> None:
    """JOB_INTERVAL=off runs nothing by itself, and SIGTERM ends it with status 0."""
    runner = children.jobrunner("run", env={**runner_env, "JOB_INTERVAL": "off"})
    runner.expect(r"external mode: idle")
    runner.terminate()
    assert 0 == runner.wait()
    assert not any("cycle" in line and "starting" in line for line in runner.lines)


def test_poll_reads_a_bad_interval_quietly(runner_env: dict[str, str]) -> None:
    """The resident process warns about JOB_INTERVAL at startup; a poll does not repeat it."""
    result = jobrunner("poll", env={**runner_env, "JOB_INTERVAL": "1d"})
    assert 0 == result.returncode, result.stderr
    assert "cannot parse interval" not in result.stderr
    assert "poll: ran\n" == result.stdout.splitlines(keepends=True)[-1]


def test_poll_runs_the_cycle_itself_when_nothing_runs(runner_env: dict[str, str]) -> None:
    """A poll that finds the lock free runs the cycle and reports ``ran``."""
    result = jobrunner("poll", env=runner_env)
    assert 0 == result.returncode, result.stderr
    assert "poll: ran\n" == result.stdout.splitlines(keepends=True)[-1]
    assert "work: cycle 1 finished" in result.stdout


def test_a_poll_exits_by_its_own_run(
    children: Children, runner_env: dict[str, str], hold: Hold
) -> None:
    """A poll whose own cycle succeeds, and which then serves another poll's queued
    request with a rerun that fails, exits 0: only its own run counts, as in the Go
    library's apps. The rerun's failure is still logged."""
    work = ROOT / "docs" / "examples" / "work.py"
    only_the_first_succeeds = (
        f'[ "$JOB_CYCLE" = 1 ] && exec {shlex.quote(sys.executable)} '
        f"{shlex.quote(str(work))} || exit 3"
    )
    env = {
        **runner_env,
        "WORK_HOLD": str(hold.path),
        "JOB_COMMAND": shlex.join(["sh", "-c", only_the_first_succeeds]),
    }
    first = children.jobrunner("poll", env=env)
    first.expect(r"work: cycle 1 started")
    second = jobrunner("poll", env=env)
    assert 0 == second.returncode, second.stderr
    assert "poll: queued\n" == second.stdout
    hold.release()
    first.expect(
        r"cycle failed: cycle run failed \(outcome ran-queued\): CycleFailed: cycle 2: "
        r"command exited with status 3"
    )
    first.expect(r"^poll: ran-queued$")
    assert 0 == first.wait()


def test_a_poll_whose_own_run_fails_exits_1(runner_env: dict[str, str]) -> None:
    """A poll whose own cycle fails exits 1."""
    result = jobrunner("poll", env={**runner_env, "JOB_COMMAND": "sh -c 'exit 3'"})
    assert 1 == result.returncode
    assert "poll: ran\n" == result.stdout


def test_builtin_mode_coalesces_a_poll_and_drains_on_sigterm(
    children: Children, runner_env: dict[str, str], hold: Hold
) -> None:
    """Startup run, a poll queued mid-run and served by a rerun, a tick, then a SIGTERM drain.

    The command gets SIGTERM (it reports it and exits 143, not -9), the job
    returns, no new cycle starts, and the runner exits 0.
    """
    env = {**runner_env, "JOB_INTERVAL": "1s", "WORK_HOLD": str(hold.path)}
    runner = children.jobrunner("run", env=env)
    runner.expect(r"cycle 1 starting \(startup run\)")
    runner.expect(r"work: cycle 1 started")

    poll = jobrunner("poll", env=env)
    assert 0 == poll.returncode, poll.stderr
    assert "poll: queued" in poll.stdout

    once = jobrunner("run", env={**env, "JOB_INTERVAL": "0"})
    assert 0 == once.returncode, once.stderr
    assert "cycle lock busy; skipping tick" in once.stderr
    assert "cycle outcome: skipped" in once.stderr

    hold.release()
    runner.expect(r"running queued cycle request \(attempt 1\)")
    runner.expect(r"cycle 2 starting \(queued rerun\)")
    hold.release()
    runner.expect(r"cycle outcome: ran-queued")
    runner.expect(r"cycle 3 starting \(tick\)")
    runner.expect(r"work: cycle 3 started")

    runner.terminate()
    runner.expect(r"work: cycle 3 received SIGTERM")
    runner.expect(r"cycle 3 command exited with status 143")
    assert 0 == runner.wait()
    exited = next(i for i, line in enumerate(runner.lines) if "status 143" in line)
    assert not any("starting" in line for line in runner.lines[exited:])
    assert "stopped: no cycle in flight, exiting" in runner.output()


def test_daemon_trigger_round_trip(
    children: Children, runner_env: dict[str, str], short_tmp: Path
) -> None:
    """The daemon variant: an owner-only socket; a trigger gets queued, started, done ok."""
    env = {**runner_env, "JOB_INTERVAL": "off"}
    daemon = children.jobrunner("daemon", env=env)
    daemon.expect(r"listening for triggers on ")
    socket = Path(env["JOB_SOCKET"])
    assert 0o600 == stat.S_IMODE(socket.stat().st_mode)

    client = children.start(trigger(socket, {"note": "s3cr3t-payload"}, env), env=env)
    client.expect(r"^sched-trigger: queued$")
    client.expect(r"^sched-trigger: started$")
    client.expect(r"^sched-trigger: done: ok")
    assert 0 == client.wait()
    daemon.expect(r"trigger: done, ok")

    daemon.terminate()
    assert 0 == daemon.wait()
    assert "s3cr3t-payload" not in daemon.output()
    assert not socket.exists(), "the socket file is removed on shutdown"


def test_daemon_and_an_outside_poll_share_one_lock_directory(
    children: Children, runner_env: dict[str, str], hold: Hold
) -> None:
    """The trigger daemon's executor and a poll process coalesce through one directory.

    1. The daemon's startup run holds the lock; an outside ``poll`` queues
       through the directory and the daemon serves it (``ran-queued``).
    2. An outside ``poll`` holds the lock; a socket trigger makes the daemon's
       ``Exclusive.run`` queue, the client is told so (ok, ``queued: ...``),
       and the poll process serves the request with a rerun.
    """
    env = {**runner_env, "JOB_INTERVAL": "1h", "WORK_HOLD": str(hold.path)}
    daemon = children.jobrunner("daemon", env=env)
    daemon.expect(r"cycle 1 starting \(startup run\)")
    daemon.expect(r"work: cycle 1 started")
    poll = jobrunner("poll", env=env)
    assert "poll: queued" in poll.stdout
    hold.release()
    daemon.expect(r"cycle 2 starting \(queued rerun\)")
    hold.release()
    daemon.expect(r"cycle outcome: ran-queued")
    daemon.expect(r"startup run: done, ok \(ran-queued")

    holder = children.jobrunner("poll", env=env)
    holder.expect(r"work: cycle 1 started")
    client = children.start(trigger(Path(env["JOB_SOCKET"]), {}, env), env=env)
    client.expect(r"^sched-trigger: done: ok.*queued: the cycle running in another process")
    assert 0 == client.wait()
    hold.release()
    holder.expect(r"running queued cycle request \(attempt 1\)")
    hold.release()
    holder.expect(r"^poll: ran-queued$")
    assert 0 == holder.wait()

    daemon.terminate()
    assert 0 == daemon.wait()


def test_daemon_sigterm_cancels_queued_triggers(
    children: Children, runner_env: dict[str, str], hold: Hold
) -> None:
    """SIGTERM mid-run: the command gets SIGTERM; the queued trigger is cancelled unstarted."""
    env = {**runner_env, "JOB_INTERVAL": "off", "WORK_HOLD": str(hold.path)}
    daemon = children.jobrunner("daemon", env=env)
    daemon.expect(r"listening for triggers on ")
    socket = Path(env["JOB_SOCKET"])
    running = children.start(trigger(socket, {}, env), env=env)
    running.expect(r"^sched-trigger: started$")
    daemon.expect(r"work: cycle 1 started")
    waiting = children.start(trigger(socket, {}, env), env=env)
    waiting.expect(r"^sched-trigger: queued$")

    daemon.terminate()
    daemon.expect(r"work: cycle 1 received SIGTERM")
    assert 0 == daemon.wait(), daemon.output()
    assert 1 == running.wait(), running.output()
    assert "stopped by shutdown" in running.output(), daemon.output()
    assert 1 == waiting.wait(), waiting.output()
    assert "cancelled: scheduler shutting down" in waiting.output(), daemon.output()
    assert "sched-trigger: started" not in waiting.output(), daemon.output()


def test_daemon_exits_non_zero_when_its_broker_dies(
    children: Children, runner_env: dict[str, str]
) -> None:
    """A run that raises ends the broker; the broker sets the daemon's stop event, so the
    daemon notices at once and exits 1 (it used to stay up with no socket and no executor)."""
    env = {**runner_env, "JOB_INTERVAL": "off", "JOB_COMMAND": "/nonexistent/command"}
    daemon = children.jobrunner("daemon", env=env)
    daemon.expect(r"listening for triggers on ")
    client = children.start(trigger(Path(env["JOB_SOCKET"]), {}, env), env=env)
    # The client's reason and the daemon's last line both name the cause.
    client.expect(r"^sched-trigger: done: failed .*panic: .*FileNotFoundError: .*/nonexistent/")
    assert 1 == client.wait()
    assert 1 == daemon.wait(), daemon.output()
    assert "trigger broker died: RunError: cycle run failed (outcome ran): FileNotFoundError: " in (
        daemon.output()
    )
    assert not Path(env["JOB_SOCKET"]).exists()
