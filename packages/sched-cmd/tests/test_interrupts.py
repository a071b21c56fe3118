"""An exception from a signal handler, wherever it lands in sched-cmd, leaves nothing behind.

A ``KeyboardInterrupt`` (Ctrl-C) surfaces only where CPython runs pending
signal handlers: as a call returns, at a loop's backward jump, as a function
starts or a generator resumes. `Interrupter` raises one at the n-th such
point inside sched-cmd's own code, for every n, and after each interrupted
call:

* the process's wakeup fd is what it was (none): an interrupt between
  ``set_wakeup_fd`` and the ``try`` that restored it used to leave a closed
  self-pipe registered, so the signal machinery wrote into whatever reused
  the number and the next ``run()`` failed;
* no descriptor is left open (an interrupt inside ``Wakeup.__init__`` used
  to leak its pipe);
* no child process is left, running or unreaped.

Each sweep runs in a fresh interpreter: the tracer must be the only one
(coverage's beside it crashes CPython 3.12.1), and pytest's own threads and
descriptors stay out of the count. The sweep raises only in sched-cmd's
code; what CPython's own ``Popen`` does between its fork and the moment it
records the pid is left to the real-signal test below.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from sched_cmd_testkit import Interrupter, library_code, open_fds

import sched_cmd
from sched_cmd import _atomic, _child, _core, _result, _run, _stopwatch, _wakeup

#: Slow (a run per interrupt point, about 1,000 points): the suite runs once per CI
#: run, on the Python the single sessions use.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc"),
    # A Popen or a file dropped by an interrupt is collected with a ResourceWarning.
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

CODE = library_code(_atomic, _child, _core, _result, _run, _stopwatch, _wakeup, sched_cmd)


def _children() -> list[str]:
    """Our child processes, running or zombie (every thread's ``children`` in ``/proc``)."""
    found = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            found += (task / "children").read_text().split()
    return sorted(found)


def _wakeup_fd() -> int:
    """The process's wakeup fd (set back as it was)."""
    fd = signal.set_wakeup_fd(-1)
    if fd != -1:
        signal.set_wakeup_fd(fd)
    return fd


def sweep(call: Callable[[], object]) -> dict[str, object]:
    """Run *call* interrupted at each point in turn; say what each left behind."""
    assert threading.current_thread() is threading.main_thread()
    assert -1 == _wakeup_fd()
    with Interrupter(CODE, 0):  # 3.12.1 sends no opcode events the first time: prime it
        call()
    gc.collect()
    fds, children = open_fds(), _children()
    stale: list[int] = []
    leaked: list[tuple[int, list[str]]] = []
    left: list[tuple[int, list[str]]] = []
    n = 0
    while True:
        n += 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            # No automatic collection inside the call: finalizing leftovers of
            # earlier runs there would swallow the interrupt.
            gc.disable()
            try:
                with Interrupter(CODE, n) as interrupter:
                    interrupted: BaseException | None = None
                    try:
                        call()
                    except KeyboardInterrupt as exc:
                        interrupted = exc
            finally:
                gc.enable()
            fired = interrupter.fired
            # The traceback and the tracer's frame table keep every frame alive:
            # what an interrupt dropped is collected (and closed) once they go.
            del interrupted, interrupter
            gc.collect(1)  # they are young; a full collection only when that was not enough
            if open_fds() != fds:
                gc.collect()
        if _wakeup_fd() != -1:
            stale.append(n)
            signal.set_wakeup_fd(-1)
        if open_fds() != fds:
            leaked.append((n, sorted(open_fds() - fds)))
        if _children() != children:
            left.append((n, _children()))
        if not fired:
            break
    return {"points": n - 1, "stale": stale, "leaked": leaked, "left": left}


def a_plain_run() -> None:
    """A run with piped input and output, start to end."""
    run = sched_cmd.run(["cat"], input=b"x" * 1000, capture_output=True)
    assert b"x" * 1000 == run.stdout


_STOP, _STOPPED = threading.Event(), threading.Event()
_STOPPED.set()


def a_run_with_a_stop_event() -> None:
    """A run subscribed to a stop event that is never set, and one whose stop is already set."""
    sched_cmd.run(["true"], stop=_STOP)
    assert sched_cmd.run(["true"], stop=_STOPPED).stopped


def a_timeout_and_a_group() -> None:
    """The graceful stop of a timeout (SIGTERM, the grace, the reap) under kill_group."""
    with pytest.raises(subprocess.TimeoutExpired):
        sched_cmd.run(["sleep", "30"], timeout=0.001, kill_group=True, grace=5)


def a_command_that_cannot_start() -> None:
    """Popen's own failure (no such program) on the way out."""
    with pytest.raises(FileNotFoundError):
        sched_cmd.run(["/nonexistent/sched-cmd-program"], capture_output=True)


SCENARIOS: dict[str, Callable[[], None]] = {
    "plain": a_plain_run,
    "stop": a_run_with_a_stop_event,
    "timeout-group": a_timeout_and_a_group,
    "no-program": a_command_that_cannot_start,
}


def _kit_paths() -> list[str]:
    """The folders of this suite's test kit and of the shared test-support module."""
    import sched_testing

    return [str(Path(__file__).parent), str(Path(sched_testing.__file__).parent)]


@pytest.mark.parametrize(
    ("scenario", "exit_notification", "at_least"),
    [
        ("plain", "pidfd", 100),
        ("plain", "waiter-thread", 100),
        ("stop", "pidfd", 100),
        ("stop", "waiter-thread", 100),
        ("timeout-group", "pidfd", 100),
        ("no-program", "pidfd", 30),
    ],
)
def test_no_interrupt_point_leaves_anything_behind(
    scenario: str, exit_notification: str, at_least: int
) -> None:
    """Each scenario, interrupted at each of its points (in a fresh interpreter: the
    tracer must be the only one, and pytest's own threads and descriptors stay out):
    0 stale wakeup fds, 0 open descriptors, 0 children left."""
    if exit_notification == "pidfd" and not _child._HAVE_PIDFD:
        pytest.skip("no pidfd on this platform")
    # The fresh interpreter finds the test kits where pytest found them.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(_kit_paths())}
    done = subprocess.run(
        [sys.executable, __file__, scenario, exit_notification],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert 0 == done.returncode, done.stderr[-4000:]
    found = json.loads(done.stdout.splitlines()[-1])
    print(f"sweep {scenario} ({exit_notification}): {found}")
    assert found["points"] >= at_least
    assert {"stale": [], "leaked": [], "left": []} == {
        key: found[key] for key in ("stale", "leaked", "left")
    }


# --- the same with real signals ---------------------------------------------------------------

STORM = """
import gc, os, signal, subprocess, sys
import sched_cmd

runs = int(sys.argv[1])
SENDER = '''
import os, random, signal, sys, time
target, rng = int(sys.argv[1]), random.Random()
while os.read(0, 1):
    # sleep-ok: the delay is the point: each SIGINT lands at a random moment of run()
    time.sleep(rng.uniform(0, 0.004))
    os.kill(target, signal.SIGINT)
    os.write(1, b"!")
'''
go_r, go_w = os.pipe()
sent_r, sent_w = os.pipe()
sender = subprocess.Popen(
    [sys.executable, "-c", SENDER, str(os.getpid())], stdin=go_r, stdout=sent_w
)
os.close(go_r)
os.close(sent_w)
sched_cmd.run(["true"])
stale = interrupted = 0
for _ in range(runs):
    try:
        try:
            os.write(go_w, b"!")
            try:
                sched_cmd.run(["true"])
            finally:
                os.read(sent_r, 1)  # sent: it lands by the next call, as a rule
                signal.pthread_sigmask(signal.SIG_BLOCK, [])
        except KeyboardInterrupt:
            interrupted += 1
        stale += signal.set_wakeup_fd(-1) != -1
    except KeyboardInterrupt:  # it landed later than that: the run is done all the same
        interrupted += 1
        stale += signal.set_wakeup_fd(-1) != -1
signal.signal(signal.SIGINT, signal.SIG_IGN)
os.close(go_w)
sender.wait()
print(f"runs={runs} interrupted={interrupted} stale={stale}")
"""


def test_one_real_sigint_per_run_never_leaves_a_stale_wakeup_fd(tmp_path: Path) -> None:
    """The issue's harness: 1,000 runs, each hit by one real SIGINT at a random moment.
    None leaves the interpreter pointing at a closed self-pipe (it happened 1 to 14 times
    in 2,000). What CPython's own Popen drops between its fork and the moment it keeps
    the pid is out of this test's reach (see the module notes)."""
    script = tmp_path / "storm.py"
    script.write_text(STORM)
    done = subprocess.run(
        [sys.executable, str(script), "1000"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert 0 == done.returncode, done.stderr[-4000:]
    fields = dict(item.split("=") for item in done.stdout.split())
    assert int(fields["interrupted"]) > 500  # the signals did land in the runs
    assert "0" == fields["stale"]


if __name__ == "__main__":  # one sweep, run by the test above in a fresh interpreter
    if sys.argv[2] == "waiter-thread":
        _child._HAVE_PIDFD = False
    print(json.dumps(sweep(SCENARIOS[sys.argv[1]])))
