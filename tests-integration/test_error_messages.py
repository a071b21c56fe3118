"""``str()`` of every error a user logs names its cause.

``log.error("cycle failed: %s", exc)`` is what an application writes, so the
text of each exception class a package exports must say what went wrong and
where: the path, the value, the job's own exception. Each case below makes
the error the way a user meets it (a real call on real files, sockets and
processes) and checks its text; the first test keeps the cases in step with
the packages, so a new exception class needs a case here.
"""

from __future__ import annotations

import errno
import importlib
import os
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import sched_cmd
import sched_exclusive
import sched_interval
import sched_lock
import sched_loop
import sched_trigger

PACKAGES = [
    "sched_cmd",
    "sched_exclusive",
    "sched_interval",
    "sched_lock",
    "sched_loop",
    "sched_trigger",
]


@contextmanager
def short_dir() -> Iterator[Path]:
    """A temporary directory with a path short enough for a unix socket."""
    with tempfile.TemporaryDirectory(prefix="sched-err-") as tmp:
        yield Path(tmp)


def raised(call: Callable[[], object]) -> BaseException:
    """The exception *call* raises (the test fails if it returns)."""
    try:
        call()
    except BaseException as exc:  # the point is to look at it
        return exc
    pytest.fail(f"{call} raised nothing")


def interval_default() -> BaseException:
    return raised(lambda: sched_interval.interval_from_env("JOB_INTERVAL", 0, environ={}))


def duration_parse() -> BaseException:
    return raised(lambda: sched_interval.parse_duration("banana"))


def loop_config() -> BaseException:
    return raised(lambda: sched_loop.run_loop(lambda stop: None, 0))


def lock_missing_dir() -> BaseException:
    with short_dir() as tmp:
        return raised(lambda: sched_lock.try_lock(tmp / "missing" / "cycle.lock"))


def lock_busy() -> BaseException:
    with short_dir() as tmp:
        path = tmp / "cycle.lock"
        held = sched_lock.try_lock(path)
        assert held
        try:
            busy = sched_lock.try_lock(path)

            def enter() -> None:
                with busy:
                    pass

            return raised(enter)
        finally:
            held.unlock()


def command_failed() -> BaseException:
    return raised(lambda: sched_cmd.run(["sh", "-c", "exit 3"], check=True))


def command_stopped() -> BaseException:
    """A run stopped once its command is running (it says so through a FIFO)."""
    stop = threading.Event()
    with short_dir() as tmp:
        fifo = tmp / "started"
        os.mkfifo(fifo)

        def stop_once_started() -> None:
            with fifo.open() as started:  # blocks until the command opens it
                started.read()
            stop.set()

        watcher = threading.Thread(target=stop_once_started)
        watcher.start()
        try:
            command = ["sh", "-c", 'echo up > "$1"; exec sleep 30', "sh", str(fifo)]
            return raised(lambda: sched_cmd.run(command, stop=stop, check=True))
        finally:
            watcher.join()


def slot_missing_dir() -> BaseException:
    with short_dir() as tmp:
        return raised(lambda: sched_lock.SlotFile(tmp / "missing" / "slot").mutate(bytes))


def exclusive_directory_gone() -> BaseException:
    with short_dir() as tmp:
        (tmp / "state").mkdir()
        ex = sched_exclusive.Exclusive(tmp / "state")
        (tmp / "state").rmdir()  # a volume unmounted after start-up, say
        return raised(lambda: ex.run(lambda: None))


def exclusive_job_failed() -> BaseException:
    def job() -> None:
        raise RuntimeError("command exited -15")

    with short_dir() as tmp:
        return raised(lambda: sched_exclusive.Exclusive(tmp).run(job))


def queue_full() -> BaseException:
    queue: sched_trigger.Queue[None] = sched_trigger.Queue(0)
    return raised(lambda: queue.submit(sched_trigger.Job("external", None)))


def queue_closed() -> BaseException:
    queue: sched_trigger.Queue[None] = sched_trigger.Queue(1)
    queue.close()
    return raised(lambda: queue.submit(sched_trigger.Job("external", None)))


def unreachable() -> BaseException:
    with short_dir() as tmp:
        return raised(lambda: sched_trigger.submit(tmp / "none.sock", {}))


@contextmanager
def silent_daemon(path: Path, answer: bytes) -> Iterator[None]:
    """A socket that reads the request, writes *answer*, then waits until told to close."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen()
    done = threading.Event()

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.makefile("rb").readline()
            connection.sendall(answer)
            if answer:  # hang up without the final event
                return
            done.wait(30)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(30)
        listener.close()


def connection_lost() -> BaseException:
    with short_dir() as tmp, silent_daemon(tmp / "d.sock", b'{"event":"queued"}\n'):
        return raised(lambda: sched_trigger.submit(tmp / "d.sock", {}))


def submit_timeout() -> BaseException:
    with short_dir() as tmp, silent_daemon(tmp / "d.sock", b""):
        return raised(lambda: sched_trigger.submit(tmp / "d.sock", {}, timeout=0.2))


def submit_cancelled() -> BaseException:
    stop = threading.Event()
    stop.set()
    with short_dir() as tmp:
        return raised(lambda: sched_trigger.submit(tmp / "d.sock", {}, stop=stop))


def send_failed() -> BaseException:
    # Nothing orders a peer's close before the client's send, so no real call
    # fails there on demand: build it as the client does from its OSError.
    return sched_trigger.SendFailed(errno.EPIPE, os.strerror(errno.EPIPE), "/run/d.sock")


def fenced_out() -> BaseException:
    # A real one needs a PostgreSQL server, which this suite does not start:
    # sched-exclusive's test_postgres_fence.py meets it for real; build it as fence() does.
    return sched_exclusive.FencedOut("nightly-report", 41, 42)


def already_serving() -> BaseException:
    with short_dir() as tmp:
        first = sched_trigger.listen(tmp / "d.sock")
        try:
            return raised(lambda: sched_trigger.listen(tmp / "d.sock"))
        finally:
            first.close()


def not_a_socket() -> BaseException:
    with short_dir() as tmp:
        (tmp / "notes.txt").write_text("")
        return raised(lambda: sched_trigger.listen(tmp / "notes.txt"))


#: Each exported exception class: how a user meets it, and what its text must contain
#: (``{tmp}`` stands for the temporary directory's path, which the text must name).
CASES: dict[str, tuple[Callable[[], BaseException], list[str]]] = {
    "sched_cmd.CommandFailed": (command_failed, ["exit 3", "non-zero exit status 3"]),
    "sched_interval.IntervalError": (interval_default, ["default", "positive", "0"]),
    "sched_interval.DurationParseError": (duration_parse, ['"banana"']),
    "sched_loop.LoopError": (loop_config, ["interval must be positive, got 0"]),
    "sched_loop.LoopConfigError": (loop_config, ["interval must be positive, got 0"]),
    "sched_lock.LockError": (lock_missing_dir, ["No such file or directory", "cycle.lock"]),
    "sched_lock.LockBusy": (lock_busy, ["held by another holder", "cycle.lock"]),
    "sched_lock.SlotFileError": (slot_missing_dir, ["No such file or directory", "/slot"]),
    "sched_exclusive.ExclusiveError": (
        exclusive_job_failed,
        ["cycle run failed (outcome ran): RuntimeError: command exited -15"],
    ),
    "sched_exclusive.RunError": (
        exclusive_job_failed,
        ["cycle run failed (outcome ran): RuntimeError: command exited -15"],
    ),
    "sched_exclusive.FencedOut": (
        fenced_out,
        ["'nightly-report'", "cycle 41 is fenced out", "(42)", "roll this transaction back"],
    ),
    "sched_exclusive.CoordinationError": (
        exclusive_directory_gone,
        ["No such file or directory", "state/cycle.lock"],
    ),
    "sched_trigger.TriggerError": (queue_full, ["run queue is full"]),
    "sched_trigger.QueueFull": (queue_full, ["run queue is full"]),
    "sched_trigger.QueueClosed": (queue_closed, ["scheduler is shutting down"]),
    "sched_trigger.Unreachable": (unreachable, ["No such file or directory", "none.sock"]),
    "sched_trigger.SendFailed": (send_failed, ["Broken pipe", "d.sock"]),
    "sched_trigger.ConnectionLost": (connection_lost, ["d.sock"]),
    "sched_trigger.SubmitTimeout": (submit_timeout, ["timed out", "d.sock"]),
    "sched_trigger.SubmitCancelled": (submit_cancelled, ["stopped", "d.sock"]),
    "sched_trigger.AlreadyServing": (already_serving, ["already serving", "d.sock"]),
    "sched_trigger.NotASocket": (not_a_socket, ["not a socket", "notes.txt"]),
}


def exported_errors() -> list[str]:
    """Every exception class in the six packages' ``__all__``."""
    found = []
    for name in PACKAGES:
        module = importlib.import_module(name)
        for attribute in module.__all__:
            value = getattr(module, attribute)
            if isinstance(value, type) and issubclass(value, BaseException):
                found.append(f"{name}.{attribute}")
    return sorted(found)


def test_every_exported_error_has_a_case() -> None:
    """A new exception class joins the cases below."""
    assert exported_errors() == sorted(CASES)


def test_a_stopped_command_says_it_was_stopped() -> None:
    """``check=True`` on a drained run: the text tells a drain from a failure."""
    text = str(command_stopped())
    assert "It was stopped: SIGTERM sent at" in text, text


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_text_names_the_cause(name: str) -> None:
    """``str()`` of the error, met the way a user meets it, says what failed and where."""
    make, expected = CASES[name]
    error = make()
    package, _, cls = name.partition(".")
    assert isinstance(error, getattr(importlib.import_module(package), cls))
    text = str(error)
    assert [] == [part for part in expected if part not in text], text
