"""sched-loop and sched-cmd together: SIGTERM drains the loop within the command's grace.

A job runner process runs ``run_loop`` under ``stop_on_signals`` with a job
that runs a command through ``sched_cmd.run``; the test sends the runner
SIGTERM once the command reports that its own SIGTERM handling is in place.
The command must get SIGTERM (and SIGKILL only after the grace, if it ignores
it), the job must return, no new run may start, and the runner must exit 0.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Children

RUNNER = """
import sys
import sched_cmd
from sched_loop import run_loop, stop_on_signals

command, grace = sys.argv[1], float(sys.argv[2])
runs = 0

def job(stop):
    global runs
    runs += 1
    print(f"run {runs} starting", flush=True)
    result = sched_cmd.run([sys.executable, "-u", "-c", command], stop=stop, grace=grace)
    print(f"run {runs} returned {result.returncode}", flush=True)

with stop_on_signals() as stop:
    run_loop(job, 3600, jitter=0.1, fire_on_start=True, stop=stop)
print("loop returned: drained", flush=True)
"""

ARUNNER = """
import asyncio, sys
import sched_cmd
from sched_loop import arun_loop, astop_on_signals

command, grace = sys.argv[1], float(sys.argv[2])

async def main():
    runs = 0
    async def job(stop):
        nonlocal runs
        runs += 1
        print(f"run {runs} starting", flush=True)
        # The asyncio stop is graceful: the job hands the signal on itself.
        task = asyncio.ensure_future(
            sched_cmd.arun([sys.executable, "-u", "-c", command], grace=grace)
        )
        waiter = asyncio.ensure_future(stop.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            task.cancel()  # arun: SIGTERM, grace, SIGKILL, reap, then CancelledError
        try:
            result = await task
            code = result.returncode
        except asyncio.CancelledError:
            code = "cancelled"
        waiter.cancel()
        print(f"run {runs} returned {code}", flush=True)

    async with astop_on_signals() as stop:
        await arun_loop(job, 3600, fire_on_start=True, stop=stop)
    print("loop returned: drained", flush=True)

asyncio.run(main(), debug=True)
"""

TRAPS_SIGTERM = """
import signal, sys
def bye(signum, frame):
    print("command: got SIGTERM, exiting", flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, bye)
print("command: ready", flush=True)
signal.pause()
"""

IGNORES_SIGTERM = """
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("command: ready (ignoring SIGTERM)", flush=True)
while True:
    signal.pause()
"""


@pytest.mark.parametrize("runner", [RUNNER, ARUNNER], ids=["sync", "asyncio"])
def test_sigterm_drains_within_the_grace(children: Children, runner: str) -> None:
    """The command gets SIGTERM and exits; the job returns; no new run; the runner exits 0."""
    grace = 5.0
    process = children.start([sys.executable, "-u", "-c", runner, TRAPS_SIGTERM, str(grace)])
    process.expect(r"^run 1 starting$")
    process.expect(r"^command: ready$")
    sent = time.monotonic()
    process.terminate()
    process.expect(r"^command: got SIGTERM, exiting$")
    process.expect(r"^run 1 returned (143|cancelled)$")
    process.expect(r"^loop returned: drained$")
    assert 0 == process.wait()
    elapsed = time.monotonic() - sent
    assert elapsed < grace, f"drain took {elapsed:.2f}s, longer than the {grace}s grace"
    assert not any(line.startswith("run 2") for line in process.lines)


def test_a_command_ignoring_sigterm_is_killed_after_the_grace(children: Children) -> None:
    """SIGKILL comes only once the grace has passed; then the loop still drains and exits 0."""
    grace = 0.5
    process = children.start([sys.executable, "-u", "-c", RUNNER, IGNORES_SIGTERM, str(grace)])
    process.expect(r"^command: ready")
    sent = time.monotonic()
    process.terminate()
    process.expect(r"^run 1 returned -9$")
    killed_after = time.monotonic() - sent
    process.expect(r"^loop returned: drained$")
    assert 0 == process.wait()
    assert killed_after >= grace, "SIGKILL came before the grace had passed"
    assert not any(line.startswith("run 2") for line in process.lines)
