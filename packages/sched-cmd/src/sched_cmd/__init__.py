"""sched-cmd: run a subprocess that stops gracefully (SIGTERM, a grace, SIGKILL).

The Python port of the Go scheduling library's ``CommandRunner``,
``NewCommandRunner`` and ``DefaultGrace``: `run` is ``subprocess.run`` plus a
stop event, a grace period and process-group sweeping; `arun` is its asyncio
twin; `command_runner` returns the production `CommandRunner` for injection.
Each returns a `CompletedRun`, a ``subprocess.CompletedProcess`` that carries
the `GroupReport` of a ``kill_group`` run.
"""

from __future__ import annotations

import sys

if sys.platform == "win32":  # pragma: no cover - the package refuses to import there
    raise ImportError(
        "sched-cmd needs POSIX signals and process groups (SIGTERM, killpg); "
        "it supports Linux and macOS, not Windows"
    )

from ._core import DEFAULT_GRACE as DEFAULT_GRACE
from ._result import CommandFailed as CommandFailed
from ._result import CompletedRun as CompletedRun
from ._result import GroupReport as GroupReport
from ._run import CommandRunner as CommandRunner
from ._run import arun as arun
from ._run import command_runner as command_runner
from ._run import run as run

__all__ = [
    "DEFAULT_GRACE",
    "CommandFailed",
    "CommandRunner",
    "CompletedRun",
    "GroupReport",
    "arun",
    "command_runner",
    "run",
]


# A local constant, so the import loads no typing; type checkers take any
# TYPE_CHECKING as true. They see __version__ and no module __getattr__,
# which would make them accept any attribute name, typos included.
TYPE_CHECKING = False
if TYPE_CHECKING:
    __version__: str
else:

    def __getattr__(name: str) -> str:
        if name == "__version__":
            from importlib.metadata import version

            return version("sched-cmd")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


del TYPE_CHECKING  # a helper name, not an export
