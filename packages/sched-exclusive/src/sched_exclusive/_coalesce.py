"""The coalescing rules, written once over :class:`._backend.Backend`.

:func:`coalesce` is a generator that owns every decision: it yields each
time a run of the job must start, receives the job's exception (or ``None``)
back, and returns the :class:`Outcome`. The sync and asyncio drivers in
:mod:`._driver` only call or await the job, so both follow exactly the
same rules, and any backend that implements the seam inherits them.

The rules, in the order a call meets them (they are the Go library's):

1. Probe the lock without waiting.
2. Busy, skip mode: log a warning, ``skipped``.
3. Busy, queue mode: increment the counter if it is below capacity, else
   leave it (``discarded``). A recorded requester then re-probes once: if
   the runner released in between, nobody might be left to serve the entry
   just recorded, so the requester becomes the runner; if the lock is still
   busy, the request stays queued (``queued``, and only then logged so).
4. Holding the lock, consult the gate: closed means ``gated``, nothing run,
   the counter untouched (a re-probing requester's own entry stays queued).
5. Start the first cycle: settle the counter and draw the cycle's fencing
   token (one step of the backend). After a fresh acquisition (the
   first probe succeeded) any count is orphaned — left by a crashed holder,
   deferred by a holder that retired at its cap or gate, or recorded by a
   requester whose re-probe will find this call holding the lock — and the
   run about to start, which starts after every one of those requests was
   recorded, satisfies all of it: clear it, with a warning. After a re-probe
   the count holds this call's own entry, which this run satisfies: take
   exactly that one entry, silently; the rest are other requests and are
   served as reruns. The lock is won, so a counter failure here is reported
   and the run still starts (without a token if none could be drawn). A
   backend that refuses the start (the lock's session is gone, or an
   earlier cycle's fenced transaction is still open) ends the call with
   nothing run.
6. Run the job. Then, while requests are queued, start the next cycle by
   taking one (each request is owed a run, whether the previous one failed
   or not), checking the rerun cap and the gate before each; the start
   itself proves the lock is still held. At the cap or a closed gate, or on
   a counter failure, stop consuming and go to step 7; if the backend
   refuses the start, stop there.
7. Release, then read the counter once more: a request that found the lock
   busy just before the release and whose re-probe came too early is served
   by taking the lock back (a handoff), unless the gate is closed or the cap
   reached, which defer it (and are logged only now, with the count read
   after the release, as in Go). If the lock is taken meanwhile, that holder
   serves the demand. A failure of this look ends the call.

Deferral (cap or gate) always leaves the demand in the counter; the next
acquisition's run satisfies it. A gate that raises counts as closed for the
rest of the call, its error kept once.

Two rules hold throughout. Only the process that made the call acts for it:
in a process the job forked (``fork()`` without ``exec``), the call ends
once the job returns there, without touching the counter, and the lease only
gives up that process's handle. And the lease is held by one variable that
the cleanup sees from the moment it is acquired to the moment it is
released, so an exception landing anywhere (a ``KeyboardInterrupt``, a
cancellation) propagates with the lock already released.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Generator
from functools import partial

from ._backend import CLEAR, TAKE_ONE, Backend, Lease, NotStarted, enqueue
from ._compat import TYPE_CHECKING, final
from ._errors import CoordinationError, RunError
from ._outcome import Outcome

if TYPE_CHECKING:
    from typing import Any

__all__ = ["MAX_RERUNS", "Cycle", "Lines", "Step", "coalesce"]

#: The most queued reruns one call executes, across consume loops and
#: handoffs, before it retires and leaves the rest for the next acquisition.
MAX_RERUNS = 8


@final
class Cycle:
    """One run about to start: the lease it runs under and its fencing token.

    ``token`` is an :class:`OSError` when none could be drawn (it is what
    a job asking for its token gets). ``backend`` is the coordinator's.
    """

    __slots__ = ("backend", "lease", "token")

    def __init__(self, backend: Backend, lease: Lease, token: int | OSError) -> None:
        self.backend = backend
        self.lease = lease
        self.token = token


#: What :func:`coalesce` yields for (the cycle to run: "run the job now"),
#: receives (the job's exception or ``None``) and returns.
Step = Generator[Cycle, Exception | None, Outcome]

#: Each failure of a call with the attempt it belongs to: 0 for the call's
#: own run, n for the n-th rerun, ``None`` for the gate, the lock or the
#: counter.
Failures = list[tuple[Exception, int | None]]

_getpid = os.getpid


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
        The held lease, once per run to start; the driver sends back the
        job's exception or ``None``. A ``BaseException`` that is not an ``Exception`` is thrown
        in instead, and propagates at once after the lock is released.

    Returns:
        The outcome, when nothing failed.

    Raises:
        CoordinationError: the lock or counter failed before anything ran.
        RunError: a job, the gate, or the holder-side lock or counter failed.
    """
    owner = _getpid()
    held: Lease | None = None
    try:
        try:
            held = backend.try_acquire()
        except OSError as exc:
            raise CoordinationError.from_os_error(exc, Outcome.NONE) from exc
        own_entry = False
        if held is None:
            if not queue:
                log(logging.WARNING, "cycle lock busy; skipping tick")
                return Outcome.SKIPPED
            try:
                before = backend.update_counter(enqueue(capacity))
            except OSError as exc:
                raise CoordinationError.from_os_error(exc, Outcome.NONE) from exc
            if before >= capacity:
                log(
                    logging.INFO,
                    "cycle lock busy; rerun already queued; discarding request "
                    "(%d pending, capacity %d)",
                    before,
                    capacity,
                    pending=before,
                    capacity=capacity,
                )
                return Outcome.DISCARDED
            # Re-probe once: the runner may have released between our probe
            # and our increment, after its last look at the counter. Then
            # nobody might serve the entry we just recorded: we serve it.
            try:
                held = backend.try_acquire()
            except OSError as exc:
                raise CoordinationError.from_os_error(exc, Outcome.QUEUED) from exc
            if held is None:
                log(
                    logging.INFO,
                    "cycle lock busy; queued rerun request (%d pending, capacity %d)",
                    before + 1,
                    capacity,
                    pending=before + 1,
                    capacity=capacity,
                )
                return Outcome.QUEUED
            log(logging.DEBUG, "cycle lock released meanwhile; serving the queued request here")
            own_entry = True

        # Holding the lock from here on.
        failures: Failures = []
        gate_open = _Gate(gate, failures).open
        if not gate_open():
            log(logging.INFO, "cycle gate closed; skipping run")
            held = _release(held, failures)
            return _finish(failures, Outcome.GATED)
        # Our own entry: this run serves it. Otherwise every count is orphaned,
        # and said so before the clear commits: no log handler runs between a
        # take and the job it is for (a holder dying there loses the request).
        seen = None if own_entry or not log.enabled(logging.WARNING) else partial(_stale, log)
        try:
            _, token, counter_failed = backend.start(
                held, TAKE_ONE if own_entry else CLEAR, always=True, seen=seen
            )
        except NotStarted as exc:
            raise CoordinationError.from_os_error(
                exc, Outcome.QUEUED if own_entry else Outcome.NONE
            ) from exc
        if counter_failed is not None:
            failures.append((counter_failed, None))  # the lock is won: the run starts all the same

        reruns = 0
        attempt: int | None = 0  # of the run about to start; None: no more runs
        while attempt is not None:
            assert held is not None  # a run starts only under the lock
            failure = yield Cycle(backend, held, token)
            if failure is not None:
                failures.append((failure, attempt))
            attempt = None
            if _getpid() != owner:
                break  # a process the job forked: the lock and the counter are its parent's
            while True:  # find the next run, if any
                try:
                    pending = backend.read_counter(held)  # through the lease while held
                except NotStarted as exc:
                    failures.append((exc, None))  # the lock is lost: no rerun, no handoff
                    break
                except OSError as exc:
                    failures.append((exc, None))
                    if held is None:
                        break  # the look after the release failed: stop here
                    held = _release(held, failures)  # stop consuming; look once more
                    continue
                if pending == 0:
                    if held is None:
                        break
                    # Release, then look once more: a request recorded after
                    # the read above whose re-probe found us still holding
                    # has nobody else to serve it.
                    held = _release(held, failures)
                    continue
                capped = reruns >= MAX_RERUNS
                if held is not None:
                    if capped or not gate_open():
                        # Retire: release, then look once more, and say why
                        # only if demand is still pending then, as Go does.
                        held = _release(held, failures)
                        continue
                elif not gate_open():
                    log(
                        logging.INFO,
                        "cycle gate closed; deferring queued demand (%d pending)",
                        pending,
                        pending=pending,
                    )
                    break
                elif capped:
                    log(
                        logging.WARNING,
                        "rerun cap reached; deferring queued demand (%d pending, cap %d)",
                        pending,
                        MAX_RERUNS,
                        pending=pending,
                        cap=MAX_RERUNS,
                    )
                    break
                handoff = held is None
                if held is None:
                    try:
                        held = backend.try_acquire()
                    except OSError as exc:
                        failures.append((exc, None))
                        break
                    if held is None:
                        break  # another holder took the lock: it serves the demand
                    log(
                        logging.DEBUG,
                        "queued demand arrived after release; took the cycle lock back",
                        pending=pending,
                    )
                try:
                    before, token, counter_failed = backend.start(held, TAKE_ONE)
                except NotStarted as exc:
                    failures.append((exc, None))  # never rerun unguarded, nor too early
                    break
                if counter_failed is not None:
                    failures.append((counter_failed, None))
                    if not handoff:
                        held = _release(held, failures)  # stop consuming; look once more
                        continue
                    had = True  # a handoff runs for the demand it saw, as in Go
                else:
                    had = before > 0
                if had:
                    reruns += 1
                    attempt = reruns
                    log(
                        logging.INFO,
                        "running queued cycle request (attempt %d)",
                        reruns,
                        attempt=reruns,
                    )
                    break
                # Served by a holder that came and went meanwhile: look again.
        held = _release(held, failures)
        return _finish(failures, Outcome.RAN_QUEUED if reruns else Outcome.RAN)
    except BaseException:
        # Whatever is propagating (a CoordinationError, KeyboardInterrupt, a
        # cancellation) goes on unchanged: a failing release must not replace it.
        if held is not None:
            with contextlib.suppress(OSError):
                held.unlock()
        raise


def _release(held: Lease | None, failures: Failures) -> Lease | None:
    """Release ``held`` if any; a failure is one more holder-side error.

    Returns ``None``, for the caller to store in place of the lease: until
    that store, the caller's cleanup may release it again, which does
    nothing.
    """
    if held is not None:
        try:
            held.unlock()
        except OSError as exc:
            failures.append((exc, None))
    return None


def _finish(failures: Failures, outcome: Outcome) -> Outcome:
    """Return ``outcome``, or raise it with the failures."""
    if failures:
        what = "gate failed" if outcome is Outcome.GATED else "run failed"
        raise RunError(
            f"cycle {what} (outcome {outcome})",
            [exc for exc, _ in failures],
            outcome,
            [attempt for _, attempt in failures],
        )
    return outcome


def _stale(log: Lines, pending: int) -> None:
    """Say that a fresh holder clears ``pending`` orphaned requests (if any)."""
    if pending:
        log(
            logging.WARNING,
            "stale queued-run marker cleared at startup (%d pending)",
            pending,
            pending=pending,
        )


@final
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

    def enabled(self, level: int) -> bool:
        """Whether a line of ``level`` would be emitted."""
        return self._logger.isEnabledFor(level)


@final
class _Gate:
    """The gate of one call. One that raises counts as closed from then on,
    its error kept once."""

    __slots__ = ("_failures", "_gate")

    def __init__(self, gate: Callable[[], bool] | None, failures: Failures) -> None:
        self._gate = gate
        self._failures = failures

    def open(self) -> bool:
        """Whether a run may start now."""
        gate = self._gate
        if gate is None:
            return True
        try:
            return bool(gate())
        except Exception as exc:
            self._failures.append((exc, None))
            self._gate = _closed
            return False


def _closed() -> bool:
    return False
