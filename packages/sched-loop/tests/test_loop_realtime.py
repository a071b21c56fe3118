"""run_loop in real time, with generous bounds: it really sleeps in one wait and drains."""

from __future__ import annotations

import threading
import time

from sched_loop_testkit import DEADLINE

from sched_loop import run_loop


def test_runs_at_the_interval_in_real_time() -> None:
    """Five runs at 20 ms take at least ~80 ms and (generously) under 10 s."""
    starts: list[float] = []
    stop = threading.Event()

    def job(stop: threading.Event) -> None:
        starts.append(time.monotonic())
        if len(starts) == 5:
            stop.set()

    run_loop(job, 0.02, fire_on_start=True, stop=stop)
    assert 5 == len(starts)
    assert 0.08 - 0.005 <= starts[-1] - starts[0] < 10.0


def test_stop_from_another_thread_wakes_a_one_hour_wait() -> None:
    """Setting stop while the loop sleeps out a one-hour interval returns it promptly."""
    stop = threading.Event()
    ran = threading.Event()
    runs: list[int] = []

    def job(stop: threading.Event) -> None:
        runs.append(1)
        ran.set()

    def stopper() -> None:
        ran.wait(DEADLINE)
        stop.set()

    thread = threading.Thread(target=stopper)
    thread.start()
    started = time.monotonic()
    run_loop(job, 3600, fire_on_start=True, stop=stop)
    thread.join(DEADLINE)
    assert [1] == runs
    assert time.monotonic() - started < 10.0


def test_stop_during_a_real_run_drains_it() -> None:
    """Stop set while a run is in flight: the run finishes, no other starts, the loop returns."""
    stop = threading.Event()
    in_run = threading.Event()
    release = threading.Event()
    events: list[str] = []

    def job(stop: threading.Event) -> None:
        events.append("start")
        in_run.set()
        release.wait(DEADLINE)
        events.append("end" if stop.is_set() else "end without stop")

    def controller() -> None:
        in_run.wait(DEADLINE)
        stop.set()
        release.set()

    thread = threading.Thread(target=controller)
    thread.start()
    run_loop(job, 0.001, fire_on_start=True, stop=stop)
    thread.join(DEADLINE)
    assert ["start", "end"] == events
