"""The package's exception hierarchy: every error carries the call's outcome."""

from __future__ import annotations

import typing
from collections.abc import Sequence

from ._outcome import Outcome

__all__ = ["CoordinationError", "ExclusiveError", "RunError"]


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


@typing.final
class CoordinationError(ExclusiveError, OSError):
    """The lock or counter file failed before this call ran the job.

    ``outcome`` is :attr:`Outcome.NONE` when the failure stopped the request
    from running or queueing at all (a missing or read-only directory, say),
    and :attr:`Outcome.QUEUED` when the request was recorded but the re-probe
    that follows failed: the demand stands, and the current or next runner
    serves it. ``errno``, ``strerror`` and ``filename`` are those of the
    underlying :class:`OSError`, which is also chained as ``__cause__``.
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


@typing.final
class RunError(ExclusiveError, ExceptionGroup[Exception]):
    """The job ran (or its run was about to start) and something failed.

    It holds every exception of the call, in order: the first run's, each
    queued rerun's (the consume loop goes on through job failures), a
    raising gate's, and any failure of the lock or counter file while this
    call held the lock (an :class:`OSError`). ``outcome`` is
    :attr:`Outcome.RAN` or :attr:`Outcome.RAN_QUEUED` when a job ran, and
    :attr:`Outcome.GATED` when the gate itself raised before the first run.
    It works with ``except*`` (subgroups keep the outcome) and pickles.
    """

    def __new__(cls, message: str, exceptions: Sequence[Exception], outcome: Outcome) -> RunError:
        self = super().__new__(cls, message, exceptions)
        self.outcome = outcome
        return self

    def __init__(self, message: str, exceptions: Sequence[Exception], outcome: Outcome) -> None:
        super().__init__(message, exceptions)

    def derive(self, excs: Sequence[Exception]) -> RunError:  # type: ignore[override]
        """Build a subgroup with the same message and outcome (``except*``, ``split``).

        Args:
            excs: the exceptions the subgroup holds.

        Returns:
            A :class:`RunError` carrying this group's message and outcome.
        """
        return RunError(self.message, excs, self.outcome)

    def __reduce__(self) -> tuple[type[RunError], tuple[str, list[Exception], Outcome]]:
        return (type(self), (self.message, list(self.exceptions), self.outcome))
