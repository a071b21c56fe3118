"""run_broker_in_thread: the whole broker for a daemon written without asyncio."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from sched_trigger_testkit import DEADLINE, Payload, socket_dir

from sched_trigger import (
    CANCELLED_REASON,
    AlreadyServing,
    Event,
    Outcome,
    run_broker_in_thread,
    submit,
)


def test_socket_requests_and_ticks_share_one_fifo() -> None:
    """A ticker thread and socket clients feed one queue; stop drains and removes the socket."""
    seen: list[tuple[str, Any]] = []

    def run(stop: threading.Event, trigger: str, payload: Payload) -> Outcome:
        seen.append((trigger, payload))
        return Outcome(True, trigger)

    with socket_dir() as tmp:
        path = str(Path(tmp) / "d.sock")
        broker = run_broker_in_thread(path, run, payload_type=Payload)
        try:
            tick = broker.submit(Payload(note="tick"))
            assert Outcome(True, "ticker") == tick.result(DEADLINE)
            assert Event("done", "external", 0, True) == submit(path, {"note": "socket"})
        finally:
            broker.stop(DEADLINE)
        assert not Path(path).exists()
        assert not broker.running
    assert [("ticker", Payload(note="tick")), ("external", Payload(note="socket"))] == seen


def test_stop_cancels_what_is_still_queued_and_tells_the_run() -> None:
    """stop() sets the run's stop event; jobs still queued get the cancelled result."""
    started = threading.Event()

    def run(stop: threading.Event, trigger: str, payload: object) -> Outcome:
        started.set()
        assert stop.wait(DEADLINE)
        return Outcome(False, "stopped early")

    with socket_dir() as tmp:
        broker = run_broker_in_thread(Path(tmp) / "d.sock", run)
        first = broker.submit(1)
        assert started.wait(DEADLINE)
        second = broker.submit(2)
        broker.stop(DEADLINE)
        broker.stop(DEADLINE)  # idempotent
    assert Outcome(False, "stopped early") == first.result(0)
    assert Outcome(False, CANCELLED_REASON) == second.result(0)


def test_a_raising_run_ends_the_broker_and_join_reraises() -> None:
    """A run that raises: its client gets 'panic: ...', and join() re-raises in the daemon."""

    def run(stop: threading.Event, trigger: str, payload: object) -> Outcome:
        raise RuntimeError("bug in the job")

    with socket_dir() as tmp:
        path = str(Path(tmp) / "d.sock")
        broker = run_broker_in_thread(path, run)
        final = submit(path, {})
        with pytest.raises(RuntimeError, match="bug in the job"):
            broker.join(DEADLINE)
        assert not Path(path).exists()
    assert (False, "panic: bug in the job") == (final.ok, final.reason)


def test_listen_errors_raise_in_the_caller() -> None:
    """A live daemon on the path is reported before any thread starts."""
    with socket_dir() as tmp:
        path = str(Path(tmp) / "d.sock")
        with (
            run_broker_in_thread(path, lambda s, t, p: Outcome(True)),
            pytest.raises(AlreadyServing),
        ):
            run_broker_in_thread(path, lambda s, t, p: Outcome(True))


def test_uvloop_is_opt_in_through_loop_factory() -> None:
    """With loop_factory=uvloop.new_event_loop the broker runs on uvloop."""
    uvloop = pytest.importorskip("uvloop")
    loops: list[str] = []

    async def run(stop: Any, trigger: str, payload: object) -> Outcome:
        import asyncio

        loops.append(type(asyncio.get_running_loop()).__module__)
        return Outcome(True)

    with socket_dir() as tmp:
        path = str(Path(tmp) / "d.sock")
        with run_broker_in_thread(path, run, loop_factory=uvloop.new_event_loop):
            assert submit(path, {}).ok
    assert ["uvloop"] == loops
