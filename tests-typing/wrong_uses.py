"""Wrong uses of the public API: ``mypy --strict`` must reject every marked line.

Checked, never run, by ``nox -s typecheck``. Each wrong line carries a
``# type: ignore[<code>]`` naming the error mypy must report there, and
unused ignores are errors in this file: if a misspelled name type-checks
(a module ``__getattr__`` visible to type checkers accepts any name), or a
final class can be subclassed, the ignore goes unused and the session fails.
Its twin, ``right_uses.py``, holds what mypy must accept.
"""

# mypy: warn-unused-ignores

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import sched_cmd
import sched_exclusive
import sched_interval
import sched_lock
import sched_loop
import sched_trigger
from sched_cmd import CommandRunner, CompletedRun


def misspelled_names() -> list[object]:
    """A typo in a public name is an error, in every package."""
    return [
        sched_cmd.rnu,  # type: ignore[attr-defined]
        sched_exclusive.Exclusiv,  # type: ignore[attr-defined]
        sched_interval.parse_intreval,  # type: ignore[attr-defined]
        sched_lock.try_lok,  # type: ignore[attr-defined]
        sched_loop.run_lop,  # type: ignore[attr-defined]
        sched_trigger.sumbit,  # type: ignore[attr-defined]
        sched_trigger.__verison__,  # type: ignore[attr-defined]
    ]


# Concrete classes are final: subclassing one is an error.
class MyRun(CompletedRun[bytes]):  # type: ignore[misc]
    pass


class MyExclusive(sched_exclusive.Exclusive):  # type: ignore[misc]
    pass


class MySchedule(sched_interval.Schedule):  # type: ignore[misc]
    pass


class MyParseError(sched_interval.DurationParseError):  # type: ignore[misc]
    pass


class MyLock(sched_lock.Lock):  # type: ignore[misc]
    pass


class MySlotFile(sched_lock.SlotFile):  # type: ignore[misc]
    pass


class MyLoopConfigError(sched_loop.LoopConfigError):  # type: ignore[misc]
    pass


class MyQueue(sched_trigger.Queue[int]):  # type: ignore[misc]
    pass


def wrong_arguments() -> None:
    """Arguments of the wrong type are errors."""
    sched_interval.parse_duration(timedelta(seconds=1))  # type: ignore[arg-type]
    sched_exclusive.Exclusive("/run/job", queue_capacity="2")  # type: ignore[arg-type]
    queue: sched_trigger.Queue[int] = sched_trigger.Queue[str](4)  # type: ignore[assignment]
    del queue


def read_only_fields(schedule: sched_interval.Schedule) -> None:
    """A ``Schedule``'s fields cannot be assigned."""
    schedule.interval = timedelta(0)  # type: ignore[misc]
    schedule.mode = sched_interval.Mode.ONCE  # type: ignore[misc]


def a_fake_runner_must_match_the_signature() -> None:
    """A fake ``CommandRunner`` without the keyword arguments a job passes is refused."""

    def fake(args: Any) -> CompletedRun[Any]:
        return CompletedRun(args, 0)

    def sync_job(runner: CommandRunner, stop: threading.Event) -> None:
        runner(["true"], stop=stop)

    sync_job(fake, threading.Event())  # type: ignore[arg-type]
