"""What a run returns: ``subprocess.CompletedProcess``, plus the report of the group sweep."""

from __future__ import annotations

import signal
import subprocess
from typing import Any, Generic, TypeVar, final

__all__ = ["CompletedRun", "GroupReport"]

#: The type of the captured output: ``str`` with ``text=True``, else ``bytes``.
T = TypeVar("T")


@final
class GroupReport:
    """What a ``kill_group`` run did to the child's process group.

    The child leads its own group (``pgid`` is its pid). A process that
    stays in the group is stopped with it; one that left it (``setsid()``,
    ``setpgid()``, a shell with job control) is neither seen nor signalled,
    and outlives the run. ``survivors`` tells that members were still
    running once the child itself had exited, and ``signals`` what the
    group was sent: SIGTERM by a stop, a timeout or the sweep of survivors,
    SIGKILL at the end of the grace. A group that needed SIGKILL did not
    stop on SIGTERM: an application may want to run nothing more until
    someone looks.

    Args:
        pgid: the process group id.
        survivors: members were still running after the child exited.
        signals: the signals sent to the group, each once, in the order
            first sent.
    """

    __slots__ = ("pgid", "signals", "survivors")

    def __init__(self, pgid: int, survivors: bool, signals: tuple[signal.Signals, ...]) -> None:
        #: The process group id: the child's pid.
        self.pgid = pgid
        #: Whether members of the group were still running after the child exited.
        self.survivors = survivors
        #: The signals sent to the group (``SIGTERM``, ``SIGKILL``), each once, in order.
        self.signals = signals

    def __repr__(self) -> str:
        names = ", ".join(sig.name for sig in self.signals)
        return f"GroupReport(pgid={self.pgid}, survivors={self.survivors}, signals=({names}))"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GroupReport):
            return NotImplemented
        return (self.pgid, self.survivors, self.signals) == (
            other.pgid,
            other.survivors,
            other.signals,
        )

    def __hash__(self) -> int:
        return hash((self.pgid, self.survivors, self.signals))


@final
class CompletedRun(subprocess.CompletedProcess[T], Generic[T]):
    """``subprocess.CompletedProcess`` with the report of a ``kill_group`` run.

    Everything a ``CompletedProcess`` has, it has (``args``, ``returncode``,
    ``stdout``, ``stderr``, ``check_returncode()``); ``group`` is the
    `GroupReport` of a run started with ``kill_group=True``, and ``None``
    otherwise or when no child was started. A run that raises instead
    (``check=True``, a ``timeout``) leaves no report. A fake `CommandRunner`
    returns one with ``CompletedRun(args, 0)``.

    Args:
        args: the command, as given.
        returncode: the exit status, or the negative signal number.
        stdout: the captured output, or ``None``.
        stderr: the captured error output, or ``None``.
        group: the sweep's report, for a ``kill_group`` run.
    """

    def __init__(
        self,
        args: Any,
        returncode: int,
        stdout: T | None = None,
        stderr: T | None = None,
        *,
        group: GroupReport | None = None,
    ) -> None:
        super().__init__(args, returncode, stdout, stderr)
        #: The report of the group sweep (``kill_group=True``), else ``None``.
        self.group = group

    def __repr__(self) -> str:
        text = super().__repr__()
        if self.group is None:
            return text
        return f"{text[:-1]}, group={self.group!r})"
