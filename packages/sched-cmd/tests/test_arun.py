"""arun, the asyncio twin: stop events, the timeout, and cancellation as a stop."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

import pytest
from sched_cmd_testkit import (
    DEADLINE,
    READY,
    SLEEP,
    TERM_EXITS,
    TERM_IGNORED,
    child,
    process_state,
    report,
)

from sched_cmd import arun


def test_arun_captures_output_like_run() -> None:
    """arun returns subprocess's CompletedProcess; check raises CalledProcessError."""

    async def main() -> None:
        result = await arun(["sh", "-c", "echo hi; exit 0"], capture_output=True, text=True)
        assert (0, "hi\n", "") == (result.returncode, result.stdout, result.stderr)
        with pytest.raises(subprocess.CalledProcessError):
            await arun(["false"], check=True)

    asyncio.run(main(), debug=True)


def test_arun_stop_event_stops_gracefully() -> None:
    """Setting the asyncio.Event sends SIGTERM; arun returns -SIGTERM."""

    async def main() -> None:
        with report() as pipe:
            stop = asyncio.Event()
            task = asyncio.create_task(
                arun(child(pipe, TERM_EXITS, READY, SLEEP), stop=stop, pass_fds=[pipe.write_fd])
            )
            await asyncio.to_thread(pipe.ready_pid)
            stop.set()
            result = await task
            assert ["got SIGTERM"] == pipe.rest()
        assert -signal.SIGTERM == result.returncode

    asyncio.run(main(), debug=True)


def test_arun_stop_set_before_the_call_starts_nothing() -> None:
    """With the asyncio stop already set, arun starts no child."""

    async def main() -> None:
        stop = asyncio.Event()
        stop.set()
        result = await arun(["sh", "-c", "exit 3"], stop=stop, capture_output=True)
        assert (-signal.SIGTERM, b"", b"") == (result.returncode, result.stdout, result.stderr)

    asyncio.run(main(), debug=True)


def test_arun_timeout_raises_timeout_expired() -> None:
    """The timeout stops the child gracefully, then raises TimeoutExpired."""

    async def main() -> None:
        with pytest.raises(subprocess.TimeoutExpired):
            await arun(["sleep", "60"], timeout=0.2)

    asyncio.run(main(), debug=True)


def test_first_cancellation_terminates_and_reaps_before_reraising() -> None:
    """Cancelling the task sends SIGTERM, waits for the exit, reaps, then re-raises."""

    async def main() -> None:
        with report() as pipe:
            task = asyncio.create_task(
                arun(child(pipe, TERM_EXITS, READY, SLEEP), pass_fds=[pipe.write_fd])
            )
            pid = await asyncio.to_thread(pipe.ready_pid)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert process_state(pid) is None  # reaped, not a zombie
            assert ["got SIGTERM"] == pipe.rest()

    asyncio.run(main(), debug=True)


def test_second_cancellation_during_the_grace_kills_at_once() -> None:
    """A second cancel while a child ignores SIGTERM sends SIGKILL now, still reaping."""

    async def main() -> None:
        with report() as pipe:
            task = asyncio.create_task(
                arun(
                    child(pipe, TERM_IGNORED, READY, SLEEP),
                    grace=DEADLINE * 10,
                    pass_fds=[pipe.write_fd],
                )
            )
            pid = await asyncio.to_thread(pipe.ready_pid)
            task.cancel()
            assert "got SIGTERM" == await asyncio.to_thread(pipe.line)
            started = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert time.monotonic() - started < DEADLINE
            assert process_state(pid) is None

    asyncio.run(main(), debug=True)


def test_cancellation_through_asyncio_timeout_becomes_timeout_error() -> None:
    """arun re-raises the cancellation, so asyncio.timeout turns it into TimeoutError."""

    async def main() -> None:
        with report() as pipe:
            scopes: list[asyncio.Timeout] = []

            async def guarded() -> subprocess.CompletedProcess[bytes]:
                async with asyncio.timeout(None) as scope:
                    scopes.append(scope)
                    return await arun(
                        child(pipe, TERM_EXITS, READY, SLEEP), pass_fds=[pipe.write_fd]
                    )

            task = asyncio.create_task(guarded())
            await asyncio.to_thread(pipe.ready_pid)
            scopes[0].reschedule(asyncio.get_running_loop().time())
            with pytest.raises(TimeoutError):
                await task
            assert ["got SIGTERM"] == pipe.rest()

    asyncio.run(main(), debug=True)


def test_arun_rejects_a_threading_event() -> None:
    """arun's stop is an asyncio.Event."""
    import threading

    async def main() -> None:
        with pytest.raises(TypeError, match=r"asyncio\.Event"):
            await arun(["true"], stop=threading.Event())  # type: ignore[arg-type]

    asyncio.run(main(), debug=True)


def test_arun_raises_the_popen_error_of_a_missing_program() -> None:
    """An error in the worker thread reaches the awaiting task."""

    async def main() -> None:
        with pytest.raises(FileNotFoundError):
            await arun(["/nonexistent/sched-cmd-test-program"])

    asyncio.run(main(), debug=True)


def test_arun_cancelled_before_its_first_step_starts_no_child(tmp_path: Path) -> None:
    """A task cancelled before arun ever ran starts nothing and ends cancelled."""
    marker = tmp_path / "started"

    async def main() -> None:
        task = asyncio.create_task(arun(["touch", str(marker)]))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main(), debug=True)
    assert not marker.exists()
