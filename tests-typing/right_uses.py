"""Right uses of the public API: ``mypy --strict`` must accept every line.

Checked, never run, by ``nox -s typecheck`` (structlog's ``tests/typing/``).
``assert_type`` pins what a user's type checker infers, so a signature that
loosens to ``Any`` or narrows by mistake fails here. Its twin,
``wrong_uses.py``, holds what mypy must reject.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any, assert_type

import sched_cmd
import sched_exclusive
import sched_interval
import sched_lock
import sched_loop
import sched_trigger
from sched_cmd import CommandRunner, CompletedRun


def versions_are_strings() -> None:
    """Every package has a ``__version__``, a ``str``."""
    assert_type(sched_cmd.__version__, str)
    assert_type(sched_exclusive.__version__, str)
    assert_type(sched_interval.__version__, str)
    assert_type(sched_lock.__version__, str)
    assert_type(sched_loop.__version__, str)
    assert_type(sched_trigger.__version__, str)


def names_resolve_to_their_types() -> None:
    """Names reached through the package (lazy ones included) keep their real types."""
    assert_type(sched_interval.parse_duration("1h30m"), int)
    assert_type(sched_interval.format_duration(timedelta(minutes=90)), str)
    assert_type(sched_interval.parse_interval("30m", "6h").interval, timedelta)
    assert_type(sched_lock.read_holder("/run/job.lock"), datetime | None)
    assert_type(sched_lock.try_lock("/run/job.lock"), sched_lock.Lock)
    assert_type(sched_exclusive.advisory_key("job"), int)
    assert_type(sched_loop.jittered_delay(60, 0.1), timedelta)
    assert_type(sched_trigger.Queue[int](4), sched_trigger.Queue[int])
    assert_type(sched_trigger.Job("external", {"n": 1}).payload, dict[str, int])


def an_app_injects_a_fake_runner() -> None:
    """Code written against ``CommandRunner`` accepts a fake with the same signature."""

    def fake(
        args: Any,
        *,
        stop: threading.Event | None = None,
        timeout: Any = None,
        kill_group: bool = False,
        check: bool = False,
        input: Any = None,
        capture_output: bool = False,
        logger: Any = None,
        **popen_kwargs: Any,
    ) -> CompletedRun[Any]:
        return CompletedRun(args, 0, b"synced\n", b"")

    def sync_job(runner: CommandRunner, stop: threading.Event) -> None:
        runner(["rsync", "-a", "/src/", "remote:/dst/"], stop=stop, capture_output=True)

    sync_job(fake, threading.Event())
    sync_job(sched_cmd.command_runner(timedelta(seconds=10)), threading.Event())
