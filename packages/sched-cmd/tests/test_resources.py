"""Descriptors, threads and children are released on every path, pidfd or not."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from types import FrameType

import pytest
from sched_cmd_testkit import (
    DEADLINE,
    READY,
    SLEEP,
    TERM_EXITS,
    TERM_IGNORED,
    child,
    on_ready,
    open_fds,
    process_state,
    report,
)

import sched_cmd._child
from sched_cmd import run


@pytest.fixture(params=["pidfd", "waiter-thread"])
def exit_notification(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test with pidfds (Linux) and with the waiter-thread fallback (macOS)."""
    if request.param == "waiter-thread":
        monkeypatch.setattr(sched_cmd._child, "_HAVE_PIDFD", False)
    elif not sched_cmd._child._HAVE_PIDFD:
        pytest.skip("no pidfd on this platform")
    return str(request.param)


class _Interrupted(Exception):
    """Raised by the test's SIGUSR1 handler in the main thread."""


@pytest.fixture
def sigusr1_interrupts() -> Iterator[None]:
    """While active, SIGUSR1 raises _Interrupted in the main thread (like Ctrl-C would)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise _Interrupted

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)


def _every_path() -> None:
    run(["true"])
    run(["sh", "-c", "echo out; echo err >&2"], capture_output=True, input=b"x" * 100_000)
    with pytest.raises(subprocess.TimeoutExpired):
        run(["sleep", "60"], timeout=0.05, capture_output=True)
    with pytest.raises(FileNotFoundError):
        run(["/nonexistent/sched-cmd-test-program"], capture_output=True)
    with pytest.raises(UnicodeDecodeError):
        run(["printf", "\\377"], capture_output=True, encoding="utf-8")
    with report() as pipe:
        stop = threading.Event()
        on_ready(pipe, lambda _pid: stop.set())
        run(
            child(pipe, TERM_IGNORED, READY, SLEEP),
            stop=stop,
            grace=0.05,
            kill_group=True,
            capture_output=True,
            pass_fds=[pipe.write_fd],
        )


def test_no_descriptor_leaks_on_any_path(exit_notification: str) -> None:
    """Normal, piped, timed out, failed to start, undecodable and killed runs leak no fd."""
    _every_path()  # warm up lazily created descriptors (logging, selectors)
    before = open_fds()
    _every_path()
    assert before == open_fds()


def test_stop_reaches_the_child_with_either_exit_notification(exit_notification: str) -> None:
    """SIGTERM then reap works with a pidfd and with the waiter-thread fallback."""
    with report() as pipe:
        stop = threading.Event()
        on_ready(pipe, lambda _pid: stop.set())
        result = run(child(pipe, TERM_EXITS, READY, SLEEP), stop=stop, pass_fds=[pipe.write_fd])
        assert ["got SIGTERM"] == pipe.rest()
    assert -signal.SIGTERM == result.returncode


def test_an_exception_while_waiting_kills_and_reaps_the_child(sigusr1_interrupts: None) -> None:
    """An exception raised in the waiting thread (a signal handler's) SIGKILLs and reaps first."""
    with report() as pipe:
        pids: list[int] = []

        def interrupt(pid: int) -> None:
            pids.append(pid)
            os.kill(os.getpid(), signal.SIGUSR1)

        on_ready(pipe, interrupt)
        with pytest.raises(_Interrupted):
            run(child(pipe, TERM_IGNORED, READY, SLEEP), pass_fds=[pipe.write_fd], grace=3600)
        assert [] == pipe.rest()  # SIGKILL, never SIGTERM
    assert process_state(pids[0]) is None


def _watchers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "sched_cmd stop watcher"}


def test_runs_sharing_a_stop_event_share_one_helper_thread_which_ends_when_it_is_set() -> None:
    """One helper thread per distinct event, whatever the number of runs; it ends once set."""
    stop = threading.Event()
    before = _watchers()
    run(["true"], stop=stop)
    run(["true"], stop=stop)
    (mine,) = _watchers() - before
    with report() as pipe:
        on_ready(pipe, lambda _pid: stop.set())
        result = run(child(pipe, TERM_EXITS, READY, SLEEP), stop=stop, pass_fds=[pipe.write_fd])
        assert ["got SIGTERM"] == pipe.rest()
    assert -signal.SIGTERM == result.returncode
    mine.join(30)
    assert not mine.is_alive()
    assert before == _watchers()


def test_a_stop_event_never_set_keeps_no_helper_once_its_runs_returned() -> None:
    """Runs whose stop events are never set leave no helper thread behind (they did, one
    per event, for the life of the process)."""
    before = _watchers()
    for _ in range(20):
        assert 0 == run(["true"], stop=threading.Event()).returncode
    started = _watchers() - before
    assert started, "the runs watched their events from a helper thread"
    deadline = time.monotonic() + DEADLINE
    for thread in started:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert set() == {thread for thread in started if thread.is_alive()}


def test_an_event_subclass_overriding_set_is_watched_by_the_helper_thread() -> None:
    """A subclass with its own set() gets the helper thread, which still stops the run."""

    class LoggingEvent(threading.Event):
        def set(self) -> None:
            super().set()

    stop = LoggingEvent()
    before = _watchers()
    with report() as pipe:
        on_ready(pipe, lambda _pid: stop.set())
        result = run(child(pipe, TERM_EXITS, READY, SLEEP), stop=stop, pass_fds=[pipe.write_fd])
        assert ["got SIGTERM"] == pipe.rest()
    assert -signal.SIGTERM == result.returncode
    for thread in _watchers() - before:
        thread.join(30)
        assert not thread.is_alive()


def test_the_stop_event_works_as_usual_after_runs() -> None:
    """After runs finish, the stop event still sets, waits and clears normally."""
    stop = threading.Event()
    run(["true"], stop=stop)
    waiter = threading.Thread(target=stop.wait)
    waiter.start()
    stop.set()
    waiter.join(30)
    assert not waiter.is_alive()
    assert stop.is_set()
