"""A scripted tour of the example job runner, as real processes (``nox -s demo``).

It starts ``jobrunner.py`` the way a container would, plays an operator's
``poll``, a one-shot tick, a trigger over the socket and a ``docker stop``, and
prints a transcript of what each process says. Every ``$`` line is the command
the demo really runs (from this folder, with this interpreter's folder first
on ``PATH``); where a container would be involved, the narration says what
``docker exec`` or ``docker stop`` would do instead. Every step waits for the
line that proves the previous one happened (a log line, a FIFO opened by the
job's command) rather than for a guessed amount of time, and every claim the
transcript makes is checked: the demo exits 1 as soon as one did not hold.
The steps are ``STEPS``, in the order the README lists them.

Run it from anywhere::

    python docs/examples/demo.py
"""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: How the transcript (and the command lines it runs) name this interpreter:
#: children get its folder first on PATH, so the name finds this very file.
PYTHON = Path(sys.executable).name
BIN = Path(sys.executable).parent
#: The steps of the tour, in order; the README's Quick start lists them too.
STEPS = (
    "Check the `JOB_INTERVAL` value before deploying it",
    "The container starts with `JOB_INTERVAL=1s`: built-in mode, a startup run at once",
    "An operator polls while that run is in flight: the request is queued",
    "A one-shot tick overlaps the same run: it is skipped",
    "The startup run ends and the queued poll is served by a rerun",
    "One interval later, a tick",
    "`docker stop` while that run is in flight: a SIGTERM drain",
    "The daemon variant starts: it owns every run; triggers only submit",
    "A trigger over the socket, answered with its run's result",
    "SIGTERM with one run in flight and one trigger waiting behind it",
)
#: Upper bound for any one step; steps take milliseconds when all is well.
STEP_DEADLINE = 20.0
GRACE = "5s"
GRACE_SECONDS = 5.0


class DemoFailed(Exception):
    """Something the transcript claims did not happen."""


_print_lock = threading.Lock()


def emit(line: str) -> None:
    """Print one whole line of the transcript (threads never interleave mid-line)."""
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def say(text: str = "") -> None:
    """Print one line of narration."""
    emit(text)


def step(number: int) -> None:
    """Print the heading of step *number* (1-based) of ``STEPS``."""
    if number > 1:
        emit("")
    emit(f"== {number}. {STEPS[number - 1]} ==")


def ok(claim: str) -> None:
    """Print a claim that has just been verified."""
    emit(f"   ✔ {claim}")


def check(condition: bool, claim: str) -> None:
    """Verify a claim: print it, or stop the demo."""
    if not condition:
        raise DemoFailed(claim)
    ok(claim)


class Process:
    """A child process whose output (stdout and stderr) is shown and recorded, line by line."""

    def __init__(self, label: str, args: Sequence[str], env: dict[str, str]) -> None:
        self.label = label
        self.lines: list[str] = []
        self._seen = 0
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.popen = subprocess.Popen(
            args,
            env=env,
            cwd=HERE,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            line = raw.rstrip("\n")
            emit(f"   {self.label:>9} | {line}")
            self._queue.put(line)
        self._queue.put(None)

    def expect(self, pattern: str, claim: str) -> re.Match[str]:
        """Wait for the next line matching *pattern* (earlier lines are kept in ``lines``)."""
        deadline = time.monotonic() + STEP_DEADLINE
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self._queue.get(timeout=max(remaining, 0.0))
            except queue.Empty:
                raise DemoFailed(
                    f"{claim}: no line matching {pattern!r} within {STEP_DEADLINE}s"
                ) from None
            if line is None:
                self._queue.put(None)
                raise DemoFailed(f"{claim}: {self.label} ended before printing {pattern!r}")
            self.lines.append(line)
            match = re.search(pattern, line)
            if match:
                ok(claim)
                return match

    def wait(self, claim: str, timeout: float = STEP_DEADLINE) -> int:
        """Wait for the process to exit and collect the rest of its output."""
        try:
            code = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise DemoFailed(f"{claim}: {self.label} still running after {timeout}s") from None
        self._reader.join(timeout=STEP_DEADLINE)
        while (line := self._queue.get()) is not None:
            self.lines.append(line)
        self._queue.put(None)
        return code

    def terminate_as_docker_stop(self) -> None:
        """Send SIGTERM, showing the command that does it: what ``docker stop`` sends PID 1."""
        say(f"   (`docker stop job` sends SIGTERM to the container's PID 1, the {self.label}:)")
        say(f"$ kill -TERM {self.popen.pid}")
        os.kill(self.popen.pid, signal.SIGTERM)

    def kill(self) -> None:
        """Kill and reap, whatever state the process is in."""
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()


class Hold:
    """The FIFO the job's command waits on (``WORK_HOLD``): keeps a run in flight on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        os.mkfifo(path)

    def release(self, claim: str) -> None:
        """Let the command waiting on the FIFO finish.

        Opening a FIFO for writing waits for its reader, so this also proves
        the command was waiting; a helper thread keeps that wait bounded.
        """
        done = threading.Event()

        def write() -> None:
            with self.path.open("w", encoding="utf-8") as fifo:
                fifo.write("go\n")
            done.set()

        threading.Thread(target=write, daemon=True).start()
        if not done.wait(STEP_DEADLINE):
            raise DemoFailed(f"{claim}: no command was waiting to be released")
        ok(claim)


def base_env(tour: dict[str, str]) -> dict[str, str]:
    """A tour's environment, shown as the ``export`` line that sets it.

    The caller's own ``JOB_*``/``WORK_*`` settings are dropped, and this
    interpreter's folder goes first on ``PATH`` so ``python`` and
    ``sched-trigger`` below are this environment's.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOB_", "WORK_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    say("$ export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in tour.items()))
    return {**env, **tour}


def start(
    label: str,
    args: Sequence[str],
    env: dict[str, str],
    *,
    extra: dict[str, str] | None = None,
    exec_in: str | None = None,
) -> Process:
    """Show the command line, then run exactly it (with *extra* set in its environment).

    *exec_in* names the container a real deployment would ``docker exec`` the
    command in; the narration says so, and the demo runs it here.
    """
    if exec_in:
        say(f"   (what `docker exec {exec_in}` would run in the container:)")
    prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in (extra or {}).items())
    say(f"$ {prefix}{shlex.join(args)}")
    return Process(label, args, {**env, **(extra or {})})


def jobrunner(*args: str) -> list[str]:
    """The command line of the example job runner (the demo runs from its folder)."""
    return [PYTHON, "jobrunner.py", *args]


def trigger_client(*args: str) -> list[str]:
    """The ``sched-trigger`` console script of this environment, or ``python -m``."""
    if (BIN / "sched-trigger").exists():
        return ["sched-trigger", *args]
    return [PYTHON, "-m", "sched_trigger", *args]


@contextmanager
def reaped(*processes: Process) -> Iterator[None]:
    """Kill and reap every process on the way out, whatever happened."""
    try:
        yield
    finally:
        for process in processes:
            process.kill()


def after(lines: list[str], marker: str) -> list[str]:
    """The lines that follow the last line containing *marker*."""
    for index in range(len(lines) - 1, -1, -1):
        if marker in lines[index]:
            return lines[index + 1 :]
    return lines


def sigterm_during_a_run(runner: Process, hold_cycle: int) -> None:
    """Send SIGTERM mid-run (``docker stop``), then check the drain (both tours share it)."""
    started_at = time.monotonic()
    runner.terminate_as_docker_stop()
    runner.expect(
        rf"work: cycle {hold_cycle} received SIGTERM",
        "the job's command got SIGTERM (not SIGKILL) and cleaned up",
    )
    runner.expect(
        rf"cycle {hold_cycle} command exited with status 143",
        "the command exited on its own (143 = 128 + SIGTERM; SIGKILL would show -9)",
    )
    code = runner.wait("the runner exits after the drain")
    elapsed = time.monotonic() - started_at
    check(code == 0, f"the runner exited with status 0 (got {code})")
    check(
        elapsed < GRACE_SECONDS,
        f"the whole drain took {elapsed:.2f}s, inside the {GRACE} grace",
    )
    later = after(runner.lines, f"cycle {hold_cycle} command exited")
    check(
        not any(re.search(r"cycle \d+ starting", line) for line in later),
        "no new cycle started after SIGTERM",
    )
    check(
        not any(" ERROR " in line for line in runner.lines),
        f"the {runner.label} logged no ERROR: a drain is not a failure",
    )


def tour_builtin(tmp: Path) -> None:
    """Built-in mode: startup run, coalesced poll, skipped overlap, tick, SIGTERM drain."""
    hold = Hold(tmp / "hold-1.fifo")
    state = str(tmp / "state-1")
    env = base_env(
        {
            "JOB_STATE_DIR": state,
            "JOB_GRACE": GRACE,
            "WORK_HOLD": str(hold.path),
            "PYTHONUNBUFFERED": "1",
        }
    )
    say("   (WORK_HOLD: a FIFO the job's command waits on, so the demo decides when a run ends)")
    step(1)
    check_value = start(
        "check", [PYTHON, "-m", "sched_interval", "1s", "--name", "JOB_INTERVAL"], env
    )
    with reaped(check_value):
        check_value.expect(r"^mode: built-in$", "1s means built-in mode")
        check_value.expect(r"^interval: 1s$", "every 1s")
        check(check_value.wait("the check returns") == 0, "no warning: the value is used as given")

    step(2)
    runner = start("runner", jobrunner("run"), env, extra={"JOB_INTERVAL": "1s"})
    with reaped(runner):
        runner.expect(
            r"built-in mode: a cycle now, then every 1s", "JOB_INTERVAL=1s selected built-in mode"
        )
        runner.expect(r"cycle 1 starting \(startup run\)", "a startup run fired at once")
        runner.expect(
            r"work: cycle 1 started", "its command is running (and held open by the demo)"
        )

        step(3)
        poll = start("poll", jobrunner("poll"), env, exec_in="job")
        with reaped(poll):
            poll.expect(r"^poll: queued$", "the poll found a cycle running and queued a rerun")
            code = poll.wait("the poll returns at once")
            check(code == 0, "the poll exited 0 without waiting for the run")
        status = start(
            "status", [PYTHON, "-m", "sched_exclusive", "status", state], env, exec_in="job"
        )
        with reaped(status):
            status.expect(
                r": running since .*; 1 queued request$", "status: running, 1 queued request"
            )
            check(
                status.wait("status returns") == 0,
                "the status check exited 0",
            )

        step(4)
        say("   (JOB_INTERVAL=0 is once mode here: one cycle, then exit -- a tick from outside.")
        say("    That is this example's choice, zero_as_once=True in jobrunner.py's Config;")
        say("    by the library's default, 0 means external mode.)")
        once = start("once", jobrunner("run"), env, extra={"JOB_INTERVAL": "0"})
        with reaped(once):
            once.expect(r"cycle outcome: skipped", "run_or_skip found the lock busy and skipped")
            code = once.wait("the one-shot exits")
            check(code == 0, "the skipped one-shot exited 0")

        step(5)
        hold.release("released the startup run's command")
        runner.expect(
            r"cycle 2 starting \(queued rerun\)", "the holder ran the queued request next"
        )
        hold.release("released the rerun's command")
        runner.expect(r"cycle outcome: ran-queued", "the runner's log says ran-queued")

        step(6)
        runner.expect(r"cycle 3 starting \(tick\)", "the ticker fired the next cycle")
        runner.expect(r"work: cycle 3 started", "its command is running (held open again)")

        step(7)
        sigterm_during_a_run(runner, 3)


def tour_daemon(tmp: Path) -> None:
    """The daemon variant: it owns every run; the ticker and the socket feed one queue."""
    hold = Hold(tmp / "hold-2.fifo")
    sock = tmp / "trigger.sock"
    say()
    env = base_env(
        {
            "JOB_STATE_DIR": str(tmp / "state-2"),
            "JOB_SOCKET": str(sock),
            "JOB_GRACE": GRACE,
            "WORK_HOLD": str(hold.path),
            "PYTHONUNBUFFERED": "1",
        }
    )
    step(8)
    daemon = start("daemon", jobrunner("daemon"), env, extra={"JOB_INTERVAL": "1h"})
    with reaped(daemon):
        daemon.expect(r"listening for triggers on ", "the trigger socket is up")
        mode = stat.S_IMODE(sock.stat().st_mode)
        check(mode == 0o600, f"the socket is owner-only (mode {mode:o})")
        daemon.expect(r"cycle 1 starting \(startup run\)", "the ticker submitted the startup run")
        hold.release("released the startup run's command")
        daemon.expect(r"startup run: done, ok", "the executor finished the startup run")

        step(9)
        payload = json.dumps({"note": "rotate the logs"})
        client = start("trigger", trigger_client(str(sock), payload), env, exec_in="job")
        with reaped(client):
            client.expect(r"^sched-trigger: queued$", "the client saw: queued")
            daemon.expect(r"cycle 2 starting \(trigger\)", "the executor started the triggered run")
            client.expect(r"^sched-trigger: started$", "the client saw: started")
            hold.release("released the triggered run's command")
            client.expect(r"^sched-trigger: done: ok", "the client saw: done, ok")
            code = client.wait("the client exits with the run's result")
            check(code == 0, "sched-trigger exited 0: the run succeeded")
        check(
            not any("rotate the logs" in line for line in daemon.lines),
            "the daemon never logged the payload",
        )

        step(10)
        running = start("trigger-a", trigger_client(str(sock), "{}"), env, exec_in="job")
        waiting: Process | None = None
        with reaped(running):
            running.expect(r"^sched-trigger: started$", "trigger A's run started")
            daemon.expect(r"work: cycle 3 started", "its command is running (held open)")
            waiting = start("trigger-b", trigger_client(str(sock), "{}"), env, exec_in="job")
            with reaped(waiting):
                waiting.expect(r"^sched-trigger: queued$", "trigger B is queued behind it")
                sigterm_during_a_run(daemon, 3)
                code_a = running.wait("trigger A gets its true result")
                check(code_a == 1, "trigger A: done, not ok (the run was stopped), exit 1")
                code_b = waiting.wait("trigger B gets a result too")
                check(
                    any("cancelled: scheduler shutting down" in line for line in waiting.lines),
                    "trigger B: done, 'cancelled: scheduler shutting down' -- never stranded",
                )
                check(
                    not any("started" in line for line in waiting.lines),
                    "trigger B never started: no new run after SIGTERM",
                )
                check(code_b == 1, "trigger B exited 1")


def main() -> int:
    """Run both tours; exit 1 at the first claim that did not hold."""
    began = time.monotonic()
    say(f"$ cd {shlex.quote(str(HERE))}")
    say(f'$ export PATH="{BIN}:$PATH"')
    with tempfile.TemporaryDirectory(prefix="sched-demo-") as tmp:
        try:
            tour_builtin(Path(tmp))
            tour_daemon(Path(tmp))
        except DemoFailed as failure:
            say()
            say(f"DEMO FAILED: {failure}")
            return 1
    say()
    say(f"All shown behaviour verified in {time.monotonic() - began:.1f}s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
