"""Cross-process run coalescing for containerized job runners.

At most one cycle runs at a time across every entry point (a daemon's tick,
a ``docker exec``'d poll subcommand); a request that finds a run in flight
queues a rerun without waiting, and a crash never wedges the job. A Python
port of the Go library's ``Exclusive``, sharing its files and formats.
"""

from __future__ import annotations

import sys

if sys.platform == "win32":  # pragma: no cover - POSIX only
    raise ImportError("sched-exclusive needs POSIX flock(2); Windows is not supported")

from ._advisory import advisory_key as advisory_key
from ._errors import CoordinationError as CoordinationError
from ._errors import ExclusiveError as ExclusiveError
from ._errors import FencedOut as FencedOut
from ._errors import RunError as RunError
from ._exclusive import Exclusive as Exclusive
from ._fence import afence as afence
from ._fence import fence as fence
from ._fence import fencing_token as fencing_token
from ._fence import lock_lost as lock_lost
from ._outcome import LOCK_NAME as LOCK_NAME
from ._outcome import QUEUE_NAME as QUEUE_NAME
from ._outcome import Outcome as Outcome

__all__ = [
    "LOCK_NAME",
    "QUEUE_NAME",
    "CoordinationError",
    "Exclusive",
    "ExclusiveError",
    "FencedOut",
    "Outcome",
    "RunError",
    "advisory_key",
    "afence",
    "fence",
    "fencing_token",
    "lock_lost",
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

            return version("sched-exclusive")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


del TYPE_CHECKING  # a helper name, not an export
