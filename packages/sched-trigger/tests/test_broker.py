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
    Queue,
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


# --- a dead broker is noticed; stop from inside a run -----------------------------------


def test_a_dead_broker_sets_the_apps_stop_event_and_join_reraises() -> None:
    """With stop=event, a broker whose run raised sets the app's event (the main thread
    waiting on it wakes) and join() re-raises the run's exception."""
    stop = threading.Event()

    def run(stop: threading.Event, trigger: str, payload: object) -> Outcome:
        raise RuntimeError("bug in the job")

    with socket_dir() as tmp:
        path = str(Path(tmp) / "d.sock")
        broker = run_broker_in_thread(path, run, stop=stop)
        final = submit(path, {})
        assert stop.wait(DEADLINE)
        with pytest.raises(RuntimeError, match="bug in the job"):
            broker.join(DEADLINE)
        assert not Path(path).exists()
    assert (False, "panic: bug in the job") == (final.ok, final.reason)


def test_setting_the_apps_stop_event_stops_the_broker() -> None:
    """The event is shared both ways: the app setting it shuts the broker down (queued jobs
    cancelled, the run in flight told at once through the same event)."""
    stop = threading.Event()
    started = threading.Event()

    def run(run_stop: threading.Event, trigger: str, payload: object) -> Outcome:
        started.set()
        assert run_stop.wait(DEADLINE)
        return Outcome(False, "stopped early")

    with socket_dir() as tmp:
        path = str(Path(tmp) / "d.sock")
        broker = run_broker_in_thread(path, run, stop=stop)
        first = broker.submit(1)
        assert started.wait(DEADLINE)
        second = broker.submit(2)
        stop.set()
        broker.join(DEADLINE)
        assert not broker.running
        assert not Path(path).exists()
    assert Outcome(False, "stopped early") == first.result(0)
    assert Outcome(False, CANCELLED_REASON) == second.result(0)


def test_stop_from_inside_a_run_requests_the_stop_and_returns() -> None:
    """A run calling broker.stop() gets control back at once (it used to wait for itself);
    join() from inside a run is refused at once."""
    box: list[BaseException] = []
    holder: list[Any] = []

    def run(stop: threading.Event, trigger: str, payload: object) -> Outcome:
        broker = holder[0]
        broker.stop()
        try:
            broker.join()
        except RuntimeError as exc:
            box.append(exc)
        return Outcome(True, "asked to stop", 0)

    with socket_dir() as tmp:
        broker = run_broker_in_thread(Path(tmp) / "d.sock", run, capacity=4)
        holder.append(broker)
        first = broker.submit(1)
        queued = broker.submit(2)
        assert Outcome(True, "asked to stop") == first.result(DEADLINE)
        broker.join(DEADLINE)
    assert Outcome(False, CANCELLED_REASON) == queued.result(0)
    assert 1 == len(box)
    assert "inside" in str(box[0])


# --- a custom executor ------------------------------------------------------------------


def test_a_custom_executor_owns_the_loop() -> None:
    """The renovate pattern: after a failure the executor halts admission and fails the
    queued jobs with its own reason, from its own thread (Queue's blocking consumer)."""
    seen: list[tuple[str, Any]] = []

    def executor(queue: Queue[int], stop: threading.Event) -> None:
        halted = False
        for job in queue:
            if halted or stop.is_set():
                job.finish(Outcome(False, "halted: an earlier run failed"))
                continue
            job.start()
            seen.append((threading.current_thread().name, job.payload))
            ok = job.payload != 2
            halted = not ok
            job.finish(Outcome(ok, "" if ok else "failed"))

    with socket_dir() as tmp:
        path = str(Path(tmp) / "d.sock")
        with run_broker_in_thread(path, executor=executor, capacity=8) as broker:
            made = [broker.submit(n) for n in (1, 2, 3)]
            results = [job.result(DEADLINE) for job in made]
            assert Event("done", "halted: an earlier run failed", 0, False) == submit(path, 4)
    assert [
        Outcome(True),
        Outcome(False, "failed"),
        Outcome(False, "halted: an earlier run failed"),
    ] == results
    assert [1, 2] == [payload for _, payload in seen]
    assert all(name != "MainThread" for name, _ in seen)


@pytest.mark.parametrize("ending", ["raises", "returns"])
def test_jobs_a_custom_executor_abandons_still_get_one_result(ending: str) -> None:
    """An executor that ends holding a job it took: that job and every queued one still
    get exactly one result, and join() re-raises what the executor raised."""
    took = threading.Event()

    def executor(queue: Queue[int], stop: threading.Event) -> None:
        job = queue.get(stop=stop)
        assert job is not None
        job.start()
        assert took.wait(DEADLINE)
        if ending == "raises":
            raise OSError("disk gone")

    with socket_dir() as tmp:
        broker = run_broker_in_thread(Path(tmp) / "d.sock", executor=executor, capacity=4)
        taken = broker.submit(1)
        assert taken.wait_started(DEADLINE)
        queued = broker.submit(2)
        took.set()
        if ending == "raises":
            with pytest.raises(OSError, match="disk gone"):
                broker.join(DEADLINE)
        else:
            broker.join(DEADLINE)
    expected = "panic: disk gone" if ending == "raises" else CANCELLED_REASON
    assert (False, expected) == (taken.result(0).ok, taken.result(0).reason)
    assert Outcome(False, CANCELLED_REASON) == queued.result(0)


def test_run_and_executor_are_exclusive() -> None:
    """Exactly one of run and executor."""
    with socket_dir() as tmp:
        path = Path(tmp) / "d.sock"
        with pytest.raises(ValueError, match="run or executor"):
            run_broker_in_thread(path)
        with pytest.raises(ValueError, match="run or executor"):
            run_broker_in_thread(path, lambda s, t, p: Outcome(True), executor=lambda q, s: None)
        assert not path.exists()
