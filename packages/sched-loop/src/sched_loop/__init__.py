"""sched-loop: the drain-on-shutdown run loop for containerized job runners.

A startup fire plus a jittered interval ticker that runs a job sequentially and
drains on stop (`run_loop`, `arun_loop`), the pure jitter core
(`jittered_delay`), and SIGTERM/SIGINT to stop-event helpers
(`stop_on_signals`, `astop_on_signals`). The asyncio twins load lazily, so
importing the package does not import asyncio.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ._errors import LoopConfigError as LoopConfigError
from ._errors import LoopError as LoopError
from ._jitter import jittered_delay as jittered_delay
from ._loop import Job as Job
from ._loop import run_loop as run_loop
from ._signals import stop_on_signals as stop_on_signals

if sys.platform == "win32":  # pragma: no cover
    raise ImportError(
        "sched-loop supports Linux and macOS only: it relies on POSIX signal handling"
    )

if TYPE_CHECKING:
    from ._aio import AsyncJob as AsyncJob
    from ._aio import arun_loop as arun_loop
    from ._aio import astop_on_signals as astop_on_signals

    __version__: str

__all__ = [
    "AsyncJob",
    "Job",
    "LoopConfigError",
    "LoopError",
    "arun_loop",
    "astop_on_signals",
    "jittered_delay",
    "run_loop",
    "stop_on_signals",
]

_LAZY = frozenset({"AsyncJob", "arun_loop", "astop_on_signals"})


# Hidden from type checkers, which would otherwise accept any attribute name.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        if name in _LAZY:
            from . import _aio

            value = getattr(_aio, name)
            globals()[name] = value
            return value
        if name == "__version__":
            from importlib.metadata import version

            return version("sched-loop")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


del TYPE_CHECKING  # a helper name, not an export


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "__version__"})
