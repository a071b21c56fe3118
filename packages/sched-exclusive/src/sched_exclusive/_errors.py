"""The package's exception hierarchy: every error carries the call's outcome."""

from __future__ import annotations

import errno
from collections.abc import Sequence

from ._compat import final
from ._outcome import Outcome

__all__ = ["CoordinationError", "ExclusiveError", "FencedOut", "RunError"]


class ExclusiveError(Exception):
    """Root of the errors :class:`Exclusive` raises.

    Whatever went wrong, the call's outcome is not lost: read it from
    ``.outcome``. The idiom for a caller that treats ``queued`` and
    ``discarded`` as success::

        try:
            outcome = ex.run(job)
        except ExclusiveError as exc:
            outcome = exc.outcome
            ...

    Attributes:
        outcome: what the request did before or despite the failure.
    """

    outcome: Outcome


@final
class CoordinationError(ExclusiveError, OSError):
    """The lock or counter file failed before this call ran the job.

    ``outcome`` is :attr:`Outcome.NONE` when the failure stopped the request
    from running or queueing at all (a missing or read-only directory, say),
    and :attr:`Outcome.QUEUED` when the request was recorded but the re-probe
    that follows failed: the demand stands, and the current or next runner
    serves it. ``errno``, ``strerror`` and ``filename`` are those of the
    underlying :class:`OSError`, which is also chained as ``__cause__``.
    The :class:`Exclusive` constructor raises it too (outcome ``none``), for
    a directory that does not exist or is not one, naming it in ``filename``.
    """

    def __init__(self, *args: object, outcome: Outcome = Outcome.NONE) -> None:
        super().__init__(*args)
        self.outcome = outcome

    @classmethod
    def from_os_error(cls, exc: OSError, outcome: Outcome) -> CoordinationError:
        """Build the error for ``exc``, keeping its errno, text and path.

        Args:
            exc: the failure of the lock or counter file.
            outcome: what the request did despite it (``none`` or ``queued``).

        Returns:
            The error to raise, chained to ``exc`` by the caller.
        """
        if exc.errno is None:
            return cls(str(exc), outcome=outcome)
        return cls(exc.errno, exc.strerror, exc.filename, outcome=outcome)


@final
class RunError(ExclusiveError, ExceptionGroup[Exception]):
    """The job ran (or its run was about to start) and something failed.

    It holds every exception of the call, in order: the first run's, each
    queued rerun's (the consume loop goes on through job failures), a
    raising gate's, and any failure of the lock or counter file while this
    call held the lock (an :class:`OSError`). ``outcome`` is
    :attr:`Outcome.RAN` or :attr:`Outcome.RAN_QUEUED` when a job ran, and
    :attr:`Outcome.GATED` when the gate itself raised before the first run.

    A call that holds the lock also serves requests that other processes
    queued, so its failures are not all its own: :attr:`attempts` tells,
    for each exception, the run it came from, and :attr:`own` is the
    exception of the call's own run, if it failed. A one-shot caller (a
    ``poll``) judges its request by ``own``, as the Go library's apps count
    only the first execution.

    It works with ``except*`` and ``split`` (subgroups keep the outcome and
    each exception's attempt) and pickles. Its ``str()`` names the cause, so
    that ``log.error("%s", exc)`` shows it: the message, then the first
    exception's type and text, and how many more there are (``cycle run
    failed (outcome ran-queued): RuntimeError: command exited -15 (and 1
    more)``).

    Args:
        message: the group's message.
        exceptions: the failures, in order.
        outcome: what the call did.
        attempts: for each exception, the attempt it belongs to (see
            :attr:`attempts`); ``None`` (the default) when unknown.

    Raises:
        ValueError: ``attempts`` does not give one attempt per exception.
    """

    _attempts: tuple[int | None, ...]

    def __new__(
        cls,
        message: str,
        exceptions: Sequence[Exception],
        outcome: Outcome,
        attempts: Sequence[int | None] | None = None,
    ) -> RunError:
        self = super().__new__(cls, message, exceptions)
        self.outcome = outcome
        if attempts is None:
            attempts = [None] * len(self.exceptions)
        elif len(attempts) != len(self.exceptions):
            raise ValueError(
                f"one attempt per exception: {len(attempts)} for {len(self.exceptions)}"
            )
        self._attempts = tuple(attempts)
        return self

    def __init__(
        self,
        message: str,
        exceptions: Sequence[Exception],
        outcome: Outcome,
        attempts: Sequence[int | None] | None = None,
    ) -> None:
        super().__init__(message, exceptions)

    @property
    def attempts(self) -> tuple[int | None, ...]:
        """The attempt of each exception, in the order of ``exceptions``.

        0 is the call's own run, n the n-th queued rerun it served (the
        ordinal of the ``running queued cycle request`` line), and ``None``
        a failure that is no run's: the gate, the lock or the counter.
        """
        return self._attempts

    @property
    def own(self) -> Exception | None:
        """The exception of the call's own run, or ``None`` if that run succeeded
        (or never started).
        """
        for exc, attempt in zip(self.exceptions, self._attempts, strict=True):
            if attempt == 0:
                return exc
        return None

    def __str__(self) -> str:
        return describe_group(self)

    def derive(self, excs: Sequence[Exception]) -> RunError:  # type: ignore[override]
        """Build a subgroup with the same message and outcome (``except*``, ``split``).

        Args:
            excs: the exceptions the subgroup holds, each keeping its attempt
                (one derived from a job's own exception group has none).

        Returns:
            A :class:`RunError` carrying this group's message and outcome.
        """
        unused = list(zip(self.exceptions, self._attempts, strict=True))
        attempts: list[int | None] = []
        for exc in excs:
            for index, (candidate, attempt) in enumerate(unused):
                if candidate is exc:
                    attempts.append(attempt)
                    del unused[index]
                    break
            else:
                attempts.append(None)
        return RunError(self.message, excs, self.outcome, attempts)

    def __reduce__(
        self,
    ) -> tuple[type[RunError], tuple[str, list[Exception], Outcome, tuple[int | None, ...]]]:
        return (type(self), (self.message, list(self.exceptions), self.outcome, self._attempts))


def describe(exc: BaseException) -> str:
    """One line for an exception: its type and its text (a group's, its first cause's).

    Args:
        exc: any exception.

    Returns:
        ``RuntimeError: command exited -15``; the type alone when the text is empty.
    """
    text = describe_group(exc) if isinstance(exc, BaseExceptionGroup) else str(exc)
    name = type(exc).__qualname__
    return f"{name}: {text}" if text else name


def describe_group(group: BaseExceptionGroup[BaseException]) -> str:
    """A group's message, its first exception (`describe`) and how many more it holds."""
    first, *rest = group.exceptions
    text = f"{group.message}: {describe(first)}"
    return f"{text} (and {len(rest)} more)" if rest else text


@final
class FencedOut(ExclusiveError, OSError):
    """A later cycle of the job has started: the fenced transaction must not commit.

    Raised by :func:`fence` and :func:`afence` when the cycle the job runs
    as is no longer the latest of its name: its lock was lost (a partition,
    a paused holder, a failover) and another cycle started since. Roll the
    transaction back; the later cycle does the work. It is an
    :class:`OSError` with ``errno.ENOLCK``, as the other lost-lock errors of
    this package are, and its ``outcome`` is :attr:`Outcome.RAN` (the job
    was running).

    Args:
        name: the job's name.
        token: the fencing token of the job's cycle.
        newer: the token of the later cycle that has started, or ``None`` when
            PostgreSQL refused the transaction's older snapshot of the row (in
            REPEATABLE READ or SERIALIZABLE) before it could be read.

    Attributes:
        name: the job's name.
        token: the fencing token of the job's cycle.
        newer: the token of the later cycle, or ``None``.
    """

    def __init__(self, name: str, token: int, newer: int | None) -> None:
        later = "a later cycle" if newer is None else f"a later cycle ({newer})"
        super().__init__(
            errno.ENOLCK,
            f"job {name!r}: cycle {token} is fenced out, {later} has started; "
            "roll this transaction back",
        )
        self.name = name
        self.token = token
        self.newer = newer
        self.outcome = Outcome.RAN

    def __reduce__(self) -> tuple[type[FencedOut], tuple[str, int, int | None]]:
        return (type(self), (self.name, self.token, self.newer))
