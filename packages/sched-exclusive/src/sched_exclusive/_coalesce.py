"""The coalescing rules, written once over :class:`._backend.Backend`.

:func:`coalesce` is a generator that owns every decision: it yields each
time a run of the job must start, receives the job's exception (or ``None``)
back, and returns the :class:`Outcome`. The sync and asyncio drivers in
:mod:`._exclusive` only call or await the job, so both follow exactly the
same rules, and any backend that implements the seam inherits them.

The rules, in the order a call meets them:

1. Probe the lock without waiting.
2. Busy, skip mode: log a warning, ``skipped``.
3. Busy, queue mode: increment the counter if it is below capacity
   (``queued``), else leave it (``discarded``). A queued requester then
   re-probes once: if the runner released in between, nobody might be left
   to serve the entry just recorded, so the requester becomes the runner.
4. Holding the lock, consult the gate: closed means ``gated``, nothing run,
   the counter untouched (a re-probing requester's own entry stays queued).
5. Settle the counter before the first run. After a fresh acquisition (the
   first probe succeeded) any count is orphaned — left by a crashed holder,
   deferred by a holder that retired at its cap or gate, or recorded by a
   requester whose re-probe will find this call holding the lock — and the
   run about to start, which starts after every one of those requests was
   recorded, satisfies all of it: clear it, with a warning. After a re-probe
   the count holds this call's own entry, which this run satisfies: take
   exactly that one entry, silently; the rest are other requests and are
   served as reruns.
6. Run the job. Then, while requests are queued, take one and rerun (each
   request is owed a run, whether the previous one failed or not), checking
   the rerun cap and the gate before each.
7. When the counter reads zero, release, then read it once more: a request
   that found the lock busy just before the release and whose re-probe came
   too early is served by taking the lock back (a handoff), under the same
   cap and gate. If the lock is taken meanwhile, that holder serves it.

Deferral (cap or gate) always leaves the demand in the counter; the next
acquisition's run satisfies it.
"""

from __future__ import annotations

import contextlib
import logging
import typing
from collections.abc import Callable, Generator
from typing import Any

from ._backend import Backend, Lease
from ._errors import CoordinationError, RunError
from ._outcome import Outcome

__all__ = ["MAX_RERUNS", "Lines", "Step", "coalesce"]

#: The most queued reruns one call executes, across consume loops and
#: handoffs, before it retires and leaves the rest for the next acquisition.
MAX_RERUNS = 8

#: What :func:`coalesce` yields for (nothing: "run the job now"), receives
#: (the job's exception or ``None``) and returns.
Step = Generator[None, Exception | None, Outcome]


def _take_one(count: int) -> int:
    return count - 1 if count > 0 else count


def _clear(_count: int) -> int:
    return 0


def coalesce(
    backend: Backend,
    *,
    queue: bool,
    capacity: int,
    gate: Callable[[], bool] | None,
    log: Lines,
) -> Step:
    """Apply the coalescing rules for one request (see the module docstring).

    Args:
        backend: the lock and counter.
        queue: queue mode (``run``) when true, skip mode (``run_or_skip``)
            when false.
        capacity: the queue capacity, at least 1.
        gate: ``None`` or a callable returning true when a run may start.
        log: where the coalescing lines go.

    Yields:
        Once per run to start; the driver sends back the job's exception or
        ``None``. A ``BaseException`` that is not an ``Exception`` is thrown
        in instead, and propagates at once after the lock is released.

    Returns:
        The outcome, when nothing failed.

    Raises:
        CoordinationError: the lock or counter failed before a run.
        RunError: a job, the gate, or the holder-side lock or counter failed.
    """
    try:
        lease = backend.try_acquire()
    except OSError as exc:
        raise CoordinationError.from_os_error(exc, Outcome.NONE) from exc
    if lease is not None:
        return (yield from _hold(backend, lease, own_entry=False, gate=gate, log=log))
    if not queue:
        log(
            logging.WARNING,
            "cycle still running; skipping tick",
            sched_outcome=Outcome.SKIPPED.value,
        )
        return Outcome.SKIPPED
    try:
        before = backend.update_counter(lambda count: count + 1 if count < capacity else count)
    except OSError as exc:
        raise CoordinationError.from_os_error(exc, Outcome.NONE) from exc
    if before >= capacity:
        log(
            logging.INFO,
            "cycle still running and %d rerun request(s) already queued; discarding request",
            before,
            sched_outcome=Outcome.DISCARDED.value,
            sched_pending=before,
            sched_capacity=capacity,
        )
        return Outcome.DISCARDED
    log(
        logging.INFO,
        "cycle still running; queued rerun request (%d of %d)",
        before + 1,
        capacity,
        sched_outcome=Outcome.QUEUED.value,
        sched_pending=before + 1,
        sched_capacity=capacity,
    )
    # Re-probe once: the runner may have released between our probe and our
    # increment, after its last look at the counter. Then nobody might serve
    # the entry we just recorded, so we serve it ourselves.
    try:
        lease = backend.try_acquire()
    except OSError as exc:
        raise CoordinationError.from_os_error(exc, Outcome.QUEUED) from exc
    if lease is None:
        return Outcome.QUEUED
    log(logging.DEBUG, "cycle lock released meanwhile; serving the queued request here")
    return (yield from _hold(backend, lease, own_entry=True, gate=gate, log=log))


def _hold(
    backend: Backend,
    lease: Lease,
    *,
    own_entry: bool,
    gate: Callable[[], bool] | None,
    log: Lines,
) -> Step:
    """Run as the holder of ``lease``: first run, reruns, handoffs; always release."""
    errors: list[Exception] = []
    held: Lease | None = lease
    try:
        if not _gate_open(gate, errors):
            log(logging.INFO, "cycle gate closed; skipping run", sched_outcome=Outcome.GATED.value)
            releasing, held = held, None
            return _finish(releasing, errors, Outcome.GATED)
        try:
            if own_entry:
                # Our own entry, which the run below satisfies: take it silently.
                backend.update_counter(_take_one)
            else:
                stale = backend.update_counter(_clear)
                if stale:
                    log(
                        logging.WARNING,
                        "stale queued-run marker cleared at startup (%d pending)",
                        stale,
                        sched_pending=stale,
                    )
        except OSError as exc:
            # Nothing ran. After a re-probe our entry may still stand: queued.
            outcome = Outcome.QUEUED if own_entry else Outcome.NONE
            raise CoordinationError.from_os_error(exc, outcome) from exc

        failure = yield
        if failure is not None:
            errors.append(failure)
        reruns = 0
        try:
            while True:
                pending = backend.read_counter()
                if pending == 0:
                    if held is None:
                        break
                    # Release, then look once more: a request recorded after
                    # the read above whose re-probe found us still holding
                    # has nobody else to serve it.
                    releasing, held = held, None
                    releasing.unlock()
                    continue
                if reruns >= MAX_RERUNS:
                    log(
                        logging.WARNING,
                        "rerun cap reached; deferring queued demand (%d reruns, %d pending)",
                        reruns,
                        pending,
                        sched_reruns=reruns,
                        sched_pending=pending,
                    )
                    break
                if not _gate_open(gate, errors):
                    log(
                        logging.INFO,
                        "cycle gate closed; deferring queued demand (%d pending)",
                        pending,
                        sched_pending=pending,
                    )
                    break
                if held is None:
                    taken = backend.try_acquire()
                    if taken is None:
                        break  # another holder took the lock: it serves the demand
                    held = taken
                    log(
                        logging.DEBUG,
                        "queued demand arrived after release; took the cycle lock back",
                        sched_pending=pending,
                    )
                if backend.update_counter(_take_one) == 0:
                    continue  # served by a holder that came and went meanwhile
                reruns += 1
                log(
                    logging.INFO,
                    "running queued cycle request (attempt %d)",
                    reruns,
                    sched_attempt=reruns,
                )
                failure = yield
                if failure is not None:
                    errors.append(failure)
        except OSError as exc:
            errors.append(exc)  # a holder-side failure: the runs so far stand
    except BaseException:
        # Whatever is propagating (a CoordinationError, KeyboardInterrupt, a
        # cancellation) goes on unchanged: a failing release must not replace it.
        if held is not None:
            with contextlib.suppress(OSError):
                held.unlock()
        raise
    return _finish(held, errors, Outcome.RAN_QUEUED if reruns else Outcome.RAN)


def _finish(held: Lease | None, errors: list[Exception], outcome: Outcome) -> Outcome:
    """Release ``held`` if still held; return ``outcome``, or raise it with the errors.

    A failing release is one more holder-side error: the outcome is kept.
    """
    if held is not None:
        try:
            held.unlock()
        except OSError as exc:
            errors.append(exc)
    if errors:
        what = "gate failed" if outcome is Outcome.GATED else "run failed"
        raise RunError(f"cycle {what} (outcome {outcome})", errors, outcome)
    return outcome


@typing.final
class Lines:
    """Logs the coalescing lines of one call with its structured fields.

    The ``extra`` dict is built only for a line that is emitted, so disabled
    levels cost one ``isEnabledFor`` check on the hot paths.
    """

    __slots__ = ("_fields", "_logger")

    def __init__(self, logger: logging.Logger, fields: dict[str, Any]) -> None:
        self._logger = logger
        self._fields = fields

    def __call__(self, level: int, message: str, *args: object, **extra: Any) -> None:
        if self._logger.isEnabledFor(level):
            self._logger.log(level, message, *args, extra=self._fields | extra, stacklevel=2)


def _gate_open(gate: Callable[[], bool] | None, errors: list[Exception]) -> bool:
    """Consult the gate; one that raises counts as closed and its error is kept."""
    if gate is None:
        return True
    try:
        return bool(gate())
    except Exception as exc:
        errors.append(exc)
        return False
