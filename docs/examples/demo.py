"""A scripted tour of the example job runner, as real processes (``nox -s demo``).

It starts ``jobrunner.py`` the way a container would, plays an operator's
``poll``, a one-shot tick, a trigger over the socket and a ``docker stop``, and
prints a transcript of what each process says. Every step waits for the line
that proves the previous one happened (a log line, a FIFO opened by the job's
command) rather than for a guessed amount of time, and every claim the
transcript makes is checked: the demo exits 1 as soon as one did not hold.

Run it from anywhere::

    python docs/examples/demo.py
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
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
JOBRUNNER = HERE / "jobrunner.py"
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

    def signal(self, signum: signal.Signals) -> None:
        """Send a signal, as ``docker stop`` sends SIGTERM to PID 1."""
        self.popen.send_signal(signum)

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


def base_env() -> dict[str, str]:
    """This process's environment without any ``JOB_*``/``WORK_*`` setting of the caller's."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("JOB_", "WORK_"))}


def jobrunner(*args: str) -> list[str]:
    """The command line of the example job runner."""
    return [sys.executable, "-u", str(JOBRUNNER), *args]


def trigger_client() -> list[str]:
    """The ``sched-trigger`` console script of this environment, or ``python -m``."""
    script = Path(sys.executable).with_name("sched-trigger")
    found = script if script.exists() else shutil.which("sched-trigger")
    return [str(found)] if found else [sys.executable, "-m", "sched_trigger"]


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


def sigterm_during_a_run(runner: Process, hold_cycle: int, started_at: float) -> None:
    """The checks shared by both tours after the runner got SIGTERM mid-run."""
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


def tour_builtin(tmp: Path) -> None:
    """Built-in mode: startup run, coalesced poll, skipped overlap, tick, SIGTERM drain."""
    hold = Hold(tmp / "hold-1.fifo")
    env = {
        **base_env(),
        "JOB_INTERVAL": "1s",
        "JOB_STATE_DIR": str(tmp / "state-1"),
        "JOB_GRACE": GRACE,
        "WORK_HOLD": str(hold.path),
        "PYTHONUNBUFFERED": "1",
    }
    say("== 0. Check the value before deploying it ==")
    say("$ python -m sched_interval 1s --name JOB_INTERVAL")
    check_value = Process(
        "check", [sys.executable, "-m", "sched_interval", "1s", "--name", "JOB_INTERVAL"], env
    )
    with reaped(check_value):
        check_value.expect(r"^mode: built-in$", "1s means built-in mode")
        check_value.expect(r"^interval: 1s$", "every 1s")
        check(check_value.wait("the check returns") == 0, "no warning: the value is used as given")

    say()
    say("== 1. The container starts: JOB_INTERVAL=1s, so built-in mode ==")
    say("$ JOB_INTERVAL=1s python jobrunner.py run")
    runner = Process("runner", jobrunner("run"), env)
    with reaped(runner):
        runner.expect(
            r"built-in mode: a cycle now, then every 1s", "JOB_INTERVAL=1s selected built-in mode"
        )
        runner.expect(r"cycle 1 starting \(startup run\)", "a startup run fired at once")
        runner.expect(
            r"work: cycle 1 started", "its command is running (and held open by the demo)"
        )

        say()
        say("== 2. An operator polls while that run is in flight ==")
        say("$ docker exec job python jobrunner.py poll")
        poll = Process("poll", jobrunner("poll"), env)
        with reaped(poll):
            poll.expect(r"^poll: queued$", "the poll found a cycle running and queued a rerun")
            code = poll.wait("the poll returns at once")
            check(code == 0, "the poll exited 0 without waiting for the run")
        say(f"$ docker exec job python -m sched_exclusive status {env['JOB_STATE_DIR']}")
        status = Process(
            "status", [sys.executable, "-m", "sched_exclusive", "status", env["JOB_STATE_DIR"]], env
        )
        with reaped(status):
            status.expect(
                r": running since .*; 1 queued request$", "status: running, 1 queued request"
            )
            check(
                status.wait("status returns") == 0,
                "the status check exited 0",
            )

        say()
        say("== 3. A one-shot tick overlaps the same run (JOB_INTERVAL=0: once mode) ==")
        say("$ JOB_INTERVAL=0 python jobrunner.py run")
        once = Process("once", jobrunner("run"), {**env, "JOB_INTERVAL": "0"})
        with reaped(once):
            once.expect(r"cycle outcome: skipped", "run_or_skip found the lock busy and skipped")
            code = once.wait("the one-shot exits")
            check(code == 0, "the skipped one-shot exited 0")

        say()
        say("== 4. The startup run ends; the queued poll is served by a rerun ==")
        hold.release("released the startup run's command")
        runner.expect(
            r"cycle 2 starting \(queued rerun\)", "the holder ran the queued request next"
        )
        hold.release("released the rerun's command")
        runner.expect(r"cycle outcome: ran-queued", "the runner's log says ran-queued")

        say()
        say("== 5. One interval later, a tick ==")
        runner.expect(r"cycle 3 starting \(tick\)", "the ticker fired the next cycle")
        runner.expect(r"work: cycle 3 started", "its command is running (held open again)")

        say()
        say("== 6. docker stop: SIGTERM while that run is in flight ==")
        say("$ docker stop job   # SIGTERM to the runner")
        started_at = time.monotonic()
        runner.signal(signal.SIGTERM)
        sigterm_during_a_run(runner, 3, started_at)


def tour_daemon(tmp: Path) -> None:
    """The daemon variant: it owns every run; the ticker and the socket feed one queue."""
    hold = Hold(tmp / "hold-2.fifo")
    sock = tmp / "trigger.sock"
    env = {
        **base_env(),
        "JOB_INTERVAL": "1h",
        "JOB_STATE_DIR": str(tmp / "state-2"),
        "JOB_SOCKET": str(sock),
        "JOB_GRACE": GRACE,
        "WORK_HOLD": str(hold.path),
        "PYTHONUNBUFFERED": "1",
    }
    say()
    say("== 7. The daemon variant: it owns every run, triggers only submit ==")
    say("$ JOB_INTERVAL=1h python jobrunner.py daemon")
    daemon = Process("daemon", jobrunner("daemon"), env)
    with reaped(daemon):
        daemon.expect(r"listening for triggers on ", "the trigger socket is up")
        mode = stat.S_IMODE(sock.stat().st_mode)
        check(mode == 0o600, f"the socket is owner-only (mode {mode:o})")
        daemon.expect(r"cycle 1 starting \(startup run\)", "the ticker submitted the startup run")
        hold.release("released the startup run's command")
        daemon.expect(r"startup run: done, ok", "the executor finished the startup run")

        say()
        say("== 8. A trigger over the socket ==")
        payload = json.dumps({"note": "rotate the logs"})
        say(f"$ docker exec job sched-trigger {sock.name} '{payload}'")
        client = Process("trigger", [*trigger_client(), str(sock), payload], env)
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

        say()
        say("== 9. SIGTERM with one run in flight and one trigger waiting behind it ==")
        running = Process("trigger-a", [*trigger_client(), str(sock), "{}"], env)
        waiting: Process | None = None
        with reaped(running):
            running.expect(r"^sched-trigger: started$", "trigger A's run started")
            daemon.expect(r"work: cycle 3 started", "its command is running (held open)")
            waiting = Process("trigger-b", [*trigger_client(), str(sock), "{}"], env)
            with reaped(waiting):
                waiting.expect(r"^sched-trigger: queued$", "trigger B is queued behind it")
                say("$ docker stop job   # SIGTERM to the daemon")
                started_at = time.monotonic()
                daemon.signal(signal.SIGTERM)
                sigterm_during_a_run(daemon, 3, started_at)
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
