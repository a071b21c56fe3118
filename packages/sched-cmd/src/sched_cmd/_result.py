"""What a run returns or raises, and what the library sent: ``CompletedRun``, ``CommandFailed``."""

from __future__ import annotations

import signal
import subprocess
from datetime import datetime

from ._compat import TYPE_CHECKING, final

if TYPE_CHECKING:
    from typing import Any, TypeVar

    #: The type of the captured output: ``str`` with ``text=True``, else ``bytes``.
    T = TypeVar("T")
else:  # no typing at import: at run time T only fills subprocess's generic alias
    T = "T"

__all__ = ["CommandFailed", "CompletedRun", "GroupReport"]


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
class CompletedRun(subprocess.CompletedProcess[T]):
    """``subprocess.CompletedProcess`` that says whether, and how, the run was stopped.

    Everything a ``CompletedProcess`` has, it has (``args``, ``returncode``,
    ``stdout``, ``stderr``, and ``check_returncode()``, which raises
    `CommandFailed`). On top:

    - ``stopped``: the run was asked to stop (its stop event was set, or an
      ``arun`` task cancelled) and the library sent the command SIGTERM (or
      SIGKILL) while it ran, or started nothing because the stop was already
      set: a drain, not a failure. A command that exited by itself before the
      stop reached it was not stopped. Check this rather than the stop event
      afterwards, which may have been set after the command ended.
    - ``sigterm_at`` and ``sigkill_at``: when the library sent SIGTERM and
      SIGKILL to the command (its group, under ``kill_group``), for any
      reason: a stop, the end of the grace, the sweep of a group's members
      left behind; ``None`` when it did not.
    - ``group``: the `GroupReport` of a run started with
      ``kill_group=True``; ``None`` otherwise or when no child was started.

    A run that raises instead (``check=True``, a ``timeout``) returns no
    result; `CommandFailed` carries the same facts. A fake `CommandRunner`
    returns one with ``CompletedRun(args, 0)``.

    Args:
        args: the command, as given.
        returncode: the exit status, or the negative signal number.
        stdout: the captured output, or ``None``.
        stderr: the captured error output, or ``None``.
        group: the sweep's report, for a ``kill_group`` run.
        stopped: the library stopped the run (see above).
        sigterm_at: when the library sent SIGTERM, as an aware UTC ``datetime``.
        sigkill_at: when the library sent SIGKILL, as an aware UTC ``datetime``.
    """

    def __init__(
        self,
        args: Any,
        returncode: int,
        stdout: T | None = None,
        stderr: T | None = None,
        *,
        group: GroupReport | None = None,
        stopped: bool = False,
        sigterm_at: datetime | None = None,
        sigkill_at: datetime | None = None,
    ) -> None:
        super().__init__(args, returncode, stdout, stderr)
        #: The report of the group sweep (``kill_group=True``), else ``None``.
        self.group = group
        #: Whether the library stopped the run (a drain, not a failure).
        self.stopped = stopped
        #: When the library sent SIGTERM to the command, or ``None``.
        self.sigterm_at = sigterm_at
        #: When the library sent SIGKILL to the command, or ``None``.
        self.sigkill_at = sigkill_at

    def check_returncode(self) -> None:
        """Raise `CommandFailed` if the returncode is non-zero, saying whether it was stopped.

        Raises:
            CommandFailed: the returncode is non-zero (a ``CalledProcessError``).
        """
        if self.returncode:
            raise CommandFailed(
                self.returncode,
                self.args,
                self.stdout,
                self.stderr,
                stopped=self.stopped,
                sigterm_at=self.sigterm_at,
                sigkill_at=self.sigkill_at,
            )

    def __repr__(self) -> str:
        text = super().__repr__()[:-1]
        if self.group is not None:
            text += f", group={self.group!r}"
        if self.stopped:
            text += ", stopped=True"
        if self.sigterm_at is not None:
            text += f", sigterm_at={self.sigterm_at!r}"
        if self.sigkill_at is not None:
            text += f", sigkill_at={self.sigkill_at!r}"
        return text + ")"


@final
class CommandFailed(subprocess.CalledProcessError):
    """The ``CalledProcessError`` that ``check=True`` raises, saying whether the run was stopped.

    It is a ``subprocess.CalledProcessError`` in every way (``returncode``,
    ``cmd``, ``output``/``stdout``, ``stderr``), and carries the facts of
    `CompletedRun`: ``stopped``, ``sigterm_at`` and ``sigkill_at``. Its
    message adds them to ``CalledProcessError``'s, so a log line tells a
    drain from a failure: ``Command '['rsync', …]' died with <Signals.SIGTERM:
    15>. It was stopped: SIGTERM sent at 2026-12-04T18:40:01.123Z, no
    SIGKILL.``

    Args:
        returncode: the exit status, or the negative signal number.
        cmd: the command, as given.
        output: the captured output, or ``None``.
        stderr: the captured error output, or ``None``.
        stopped: the library stopped the run (see `CompletedRun`).
        sigterm_at: when the library sent SIGTERM, or ``None``.
        sigkill_at: when the library sent SIGKILL, or ``None``.
    """

    def __init__(
        self,
        returncode: int,
        cmd: Any,
        output: Any = None,
        stderr: Any = None,
        *,
        stopped: bool = False,
        sigterm_at: datetime | None = None,
        sigkill_at: datetime | None = None,
    ) -> None:
        super().__init__(returncode, cmd, output, stderr)
        #: Whether the library stopped the run (a drain, not a failure).
        self.stopped = stopped
        #: When the library sent SIGTERM to the command, or ``None``.
        self.sigterm_at = sigterm_at
        #: When the library sent SIGKILL to the command, or ``None``.
        self.sigkill_at = sigkill_at

    def __str__(self) -> str:
        story = _signals_story(self.stopped, self.sigterm_at, self.sigkill_at)
        return f"{super().__str__()} {story}" if story else super().__str__()


def _when(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _signals_story(stopped: bool, sigterm_at: datetime | None, sigkill_at: datetime | None) -> str:
    """Say in one sentence whether the run was stopped and what the library sent."""
    if stopped and sigterm_at is None and sigkill_at is None:
        return "It was not started: its stop was requested before the call."
    sent = []
    if sigterm_at is not None:
        sent.append(f"SIGTERM sent at {_when(sigterm_at)}")
    if sigkill_at is not None:
        sent.append(f"SIGKILL sent at {_when(sigkill_at)}")
    elif sigterm_at is not None:
        sent.append("no SIGKILL")
    if not sent:
        return ""
    lead = "It was stopped: " if stopped else "The library sent signals: "
    return lead + ", ".join(sent) + "."
