"""A stop event set by the main thread's own SIGTERM handler while runs are in progress.

Applications set the stop event from their SIGTERM handling, and a Python
signal handler runs in the main thread between two bytecodes: wherever the
main thread is inside `run` at that moment. `run` must never hold a lock
that ``Event.set()`` needs then (the event's own lock above all), or the
handler blocks forever on a lock its own thread holds.

The child below runs commands in its main thread for a while; a second
process sends it SIGTERM at random moments, so the handler lands at every
point of `run`: before the command starts, while it runs, after it is
reaped. The sender waits for the handler to acknowledge each signal before
it sends the next: a handler interrupted by a second signal in the middle of
its own ``set()`` deadlocks whatever the library does (the reason to prefer
``sched_loop.stop_on_signals``), and that is not what this test is about.
Each round uses a fresh event that the handler always ends up setting, so
every helper thread can end. Set ``SCHED_CMD_SOAK_SECONDS`` to soak for
longer than the slow suite's 20 seconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sched_cmd_testkit import python

from sched_cmd import run

STORM = """
import faulthandler, os, signal, subprocess, sys, threading, time
from sched_cmd import run

seconds = float(sys.argv[1])
# A hang prints every thread's stack, then exits: the test sees why.
faulthandler.dump_traceback_later(seconds + 30, exit=True)
stop = threading.Event()
signals = 0

ack_read, ack_write = os.pipe()

def on_term(signum, frame):
    global signals
    signals += 1
    stop.set()
    os.write(ack_write, b"!")  # last: a signal after this finds no lock held

signal.signal(signal.SIGTERM, on_term)
SENDER = '''
import os, random, signal, sys, time
target, ack, rng = int(sys.argv[1]), int(sys.argv[2]), random.Random()
while True:
    # sleep-ok: the delay is the point: each signal lands at a random moment of run()
    time.sleep(rng.uniform(0, 0.002))
    os.kill(target, signal.SIGTERM)
    if not os.read(ack, 1):
        break
'''
sender = subprocess.Popen(
    [sys.executable, "-c", SENDER, str(os.getpid()), str(ack_read)], pass_fds=[ack_read]
)
rounds = 0
deadline = time.monotonic() + seconds
try:
    while time.monotonic() < deadline:
        stop = threading.Event()
        # A run that ends by itself, then one only the handler's set() ends.
        run(["true"], stop=stop)
        result = run(["sleep", "3600"], stop=stop)
        assert result.returncode == -signal.SIGTERM, result
        rounds += 1
finally:
    sender.kill()
    sender.wait()
for thread in threading.enumerate():
    if thread.name == "sched_cmd stop watcher":
        thread.join(30)
left = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
print(f"rounds={rounds} signals={signals} threads_left={left}")
"""


def _storm(seconds: float, tmp_path: Path) -> None:
    # Files, not pipes: a command orphaned by a hang must not hold the test's pipe open.
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(
            [*python(STORM), str(seconds)], stdout=stdout, stderr=stderr, start_new_session=True
        )
        try:
            returncode = proc.wait(timeout=seconds + 60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # whatever a hang left behind
            proc.wait()
    assert (0, "") == (returncode, err.read_text()), err.read_text()[-4000:]
    fields = dict(item.split("=", 1) for item in out.read_text().split(maxsplit=2))
    assert int(fields["rounds"]) > 0
    assert int(fields["signals"]) >= int(fields["rounds"])
    assert "[]" == fields["threads_left"].strip()  # every helper thread ended with its event


def test_sigterm_handler_setting_stop_during_runs_does_not_hang(tmp_path: Path) -> None:
    """Three seconds of the storm: every run stops, nothing hangs, no helper thread stays."""
    _storm(3, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(0)  # the storm bounds itself: the wait's timeout, then faulthandler
def test_sigterm_handler_setting_stop_during_runs_soak(tmp_path: Path) -> None:
    """Eight seconds (or ``SCHED_CMD_SOAK_SECONDS``: CI keeps to its 10-minute budget; a
    deep run sets more) of the storm, without a hang."""
    _storm(float(os.environ.get("SCHED_CMD_SOAK_SECONDS", "8")), tmp_path)


# --- what makes the handler run at once -----------------------------------------------------
# (That every helper thread blocks every signal is checked once for all packages, in
# tests-integration/test_helper_threads.py.)


@pytest.fixture
def sigusr1_seen() -> Iterator[list[int]]:
    """SIGUSR1 appends to a list while the test runs."""
    seen: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    try:
        yield seen
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_run_in_the_main_thread_sets_a_wakeup_fd_and_removes_it(
    sigusr1_seen: list[int],
) -> None:
    """Without a wakeup fd, a waiting run has one (handlers run at once), and none after."""
    during: list[int] = []

    def handler(signum: int, frame: object) -> None:
        fd = signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(fd, warn_on_full_buffer=False)
        during.append(fd)

    signal.signal(signal.SIGUSR1, handler)
    result = run(python("import os, signal; os.kill(os.getppid(), signal.SIGUSR1)"))
    assert 0 == result.returncode
    assert 1 == len(during)
    assert -1 != during[0]
    assert -1 == signal.set_wakeup_fd(-1)


def test_a_wakeup_fd_the_application_set_stays_in_place(sigusr1_seen: list[int]) -> None:
    """An application's wakeup fd (asyncio's, stop_on_signals') keeps getting its signals."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous = signal.set_wakeup_fd(write_fd)
    try:
        result = run(python("import os, signal; os.kill(os.getppid(), signal.SIGUSR1)"))
        assert write_fd == signal.set_wakeup_fd(previous)
    finally:
        signal.set_wakeup_fd(previous)
        os.close(write_fd)
    try:
        assert bytes([signal.SIGUSR1]) == os.read(read_fd, 100)
    finally:
        os.close(read_fd)
    assert (0, [signal.SIGUSR1]) == (result.returncode, sigusr1_seen)
