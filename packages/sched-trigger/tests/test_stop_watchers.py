"""A call's stop-event watcher ends with the call.

``submit(stop=…)`` and ``Queue.get(stop=…)`` learn that their event was set
from a helper thread blocked in ``Event.wait`` (the only way the event's
public API offers). An event that is never set must not keep that thread
once the calls watching it have returned: 4,000 calls with fresh events left
4,004 threads and 69 MiB behind.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from sched_trigger_testkit import DEADLINE, socket_dir

from sched_trigger import Outcome, Queue, run_broker_in_thread, submit

CALLS = 200


def _still_running(threads: list[threading.Thread]) -> list[threading.Thread]:
    """Join *threads* within one generous deadline; return those still alive."""
    deadline = time.monotonic() + DEADLINE
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [thread for thread in threads if thread.is_alive()]


def test_queue_get_with_fresh_stop_events_leaves_no_thread() -> None:
    """Waits on stop events that are never set leave no helper thread once they return."""
    queue: Queue[Any] = Queue(4)
    before = set(threading.enumerate())
    for _ in range(CALLS):
        assert queue.get(stop=threading.Event(), timeout=0.001) is None
    started = [t for t in threading.enumerate() if t not in before]
    assert started, "the waits watched their events from a helper thread"
    assert [] == _still_running(started)


def test_submit_with_fresh_stop_events_leaves_no_thread() -> None:
    """Submissions with stop events that are never set leave no helper thread behind."""

    def run(stop: threading.Event, trigger: str, payload: object) -> Outcome:
        return Outcome(True, "ok")

    with socket_dir() as tmp:
        path = str(Path(tmp) / "s")
        broker = run_broker_in_thread(path, run)
        try:
            before = set(threading.enumerate())
            for _ in range(CALLS // 4):
                assert submit(path, {}, stop=threading.Event(), timeout=DEADLINE).ok
            started = [t for t in threading.enumerate() if t not in before]
        finally:
            broker.stop(DEADLINE)
    assert [] == _still_running(started)


def test_a_stop_event_shared_by_consecutive_waits_reuses_one_helper() -> None:
    """Back-to-back waits on one event share its helper thread instead of starting one each."""
    queue: Queue[Any] = Queue(4)
    stop = threading.Event()
    before = set(threading.enumerate())
    for _ in range(20):
        assert queue.get(stop=stop, timeout=0.001) is None
    started = [t for t in threading.enumerate() if t not in before]
    assert 1 >= len(started)
    assert [] == _still_running(started)
