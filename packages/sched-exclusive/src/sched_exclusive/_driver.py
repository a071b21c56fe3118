"""Driving the coalescing rules: the job called, or awaited, each time they ask for a run.

:func:`drive` (sync) and :func:`adrive` (asyncio) step the generator of
:func:`._coalesce.coalesce`: they set :data:`._fence.RUNNING` around each run
of the job, send its exception back in, and return the outcome the rules
return; every decision is the rules'. Whatever lands where (the job's
``BaseException``, a cancellation, an exception a signal handler raised
between two steps), the rules are thrown into or closed, which releases the
lock, before it propagates.

With a loop (``arun`` on :meth:`Exclusive.postgres`), every step of the
rules (their statements) runs on the library's own threads
(:mod:`._offloop`), never the loop's default executor, and :func:`on_loop`
calls the gate back on the loop's thread; the job is awaited on the loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ._coalesce import Cycle, Step
from ._compat import TYPE_CHECKING
from ._fence import RUNNING as _RUNNING
from ._outcome import Outcome

if TYPE_CHECKING:
    import asyncio
    from typing import Any

__all__ = ["adrive", "drive", "on_loop"]


def _resume(step: Step, failure: Exception | None) -> Cycle | Outcome:
    """Send ``failure`` into the rules: the next cycle to run, or the outcome."""
    try:
        return step.send(failure)
    except StopIteration as stop:
        outcome: Outcome = stop.value
        return outcome


def drive(step: Step, job: Callable[[], object]) -> Outcome:
    """Call ``job`` each time ``step`` asks for a run; return its outcome."""
    try:
        result = _resume(step, None)
        while not isinstance(result, Outcome):
            failure: Exception | None = None
            outer = _RUNNING.get()  # restored whatever lands where: no stale cycle after
            try:
                _RUNNING.set(result)
                job()
            except Exception as exc:
                failure = exc
            except BaseException as exc:
                step.throw(exc)  # releases the lock, then re-raises exc
                raise
            finally:
                _RUNNING.set(outer)
            result = _resume(step, failure)
        return result
    finally:
        # An exception that lands outside the job (a SIGINT right after it
        # returned) leaves the rules suspended: release the lock now, not
        # when the traceback holding this frame is dropped.
        step.close()


async def adrive(
    step: Step, job: Callable[[], Awaitable[object]], loop: asyncio.AbstractEventLoop | None
) -> Outcome:
    """Await ``job()`` each time ``step`` asks for a run; return its outcome.

    With ``loop``, every step of the rules (their statements) runs in the
    library's own threads (never the loop's default executor), and the job on
    the loop.
    """
    try:
        if loop is None:
            result = _resume(step, None)
        else:
            result = await _off_loop(loop, _resume, step, None)
        while not isinstance(result, Outcome):
            failure: Exception | None = None
            outer = _RUNNING.get()
            try:
                _RUNNING.set(result)
                await job()
            except Exception as exc:
                failure = exc
            except BaseException as exc:  # CancelledError included
                if loop is None:
                    step.throw(exc)
                else:
                    await _off_loop(loop, _throw, step, exc)
                raise
            finally:
                _RUNNING.set(outer)
            if loop is None:
                result = _resume(step, failure)
            else:
                result = await _off_loop(loop, _resume, step, failure)
        return result
    finally:
        if loop is None:
            step.close()  # as in drive
        # Suspended in a run: release off the loop. (A generator's gi_suspended, which
        # the Generator protocol does not declare.)
        elif getattr(step, "gi_suspended", False):
            await _off_loop(loop, step.close)


def _throw(step: Step, exc: BaseException) -> None:
    """Throw ``exc`` into the rules (they release, then re-raise it); swallow that."""
    try:
        step.throw(exc)
    except BaseException as raised:
        if raised is not exc:
            raise


async def _off_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` on the library's own threads and return its result.

    Whatever interrupts the wait (a cancellation, an exception a signal
    handler raised on the loop's thread), it waits for ``fn`` to finish (the
    rules must never run twice at once, nor be left holding a lock they were
    stepping to: the caller closes them next, and a statement in flight ends
    within the timeouts), then propagates.
    """
    import asyncio

    done = loop.create_future()  # made before the work is handed over: never lost

    def work() -> None:
        # Settled by the future's own methods: no code of ours runs on the
        # loop's thread between the work's end and the waiter's resumption.
        try:
            result = fn(*args)
        except BaseException as exc:
            loop.call_soon_threadsafe(done.set_exception, exc)
        else:
            loop.call_soon_threadsafe(done.set_result, result)

    from ._offloop import submit

    handed: list[object] = []  # the work, once on its way (see submit)
    try:
        submit(loop, work, handed)
        return await asyncio.shield(done)
    except BaseException:
        while handed and not done.done():
            try:
                await asyncio.wait([done])
            except asyncio.CancelledError:
                continue
        if not done.cancelled() and done.exception() is not None:
            done.exception()  # retrieved: the interruption wins
        raise


def on_loop(loop: asyncio.AbstractEventLoop, gate: Callable[[], bool]) -> Callable[[], bool]:
    """``gate``, called on ``loop``'s thread from wherever the rules run."""
    from concurrent.futures import Future

    def call() -> bool:
        answer: Future[bool] = Future()

        def ask() -> None:
            try:
                answer.set_result(bool(gate()))
            except BaseException as exc:  # the rules keep a raising gate's error
                answer.set_exception(exc)

        loop.call_soon_threadsafe(ask)
        return answer.result()

    return call
