"""sched-trigger: the single-owner trigger broker.

A daemon that owns every run serves a bounded FIFO `Queue` on an owner-only
unix socket (`listen`, `Server`) and executes jobs one at a time (`execute`);
trigger subcommands `submit` a request and wait for that run's own result.

Every name loads on first use (PEP 562): the client path (`submit`,
`Event`, the errors) imports no asyncio, nor datetime, and importing the
package itself imports nothing, so the CLI can catch a Ctrl-C that lands
while it is still starting up.
"""

from __future__ import annotations

import sys as _sys

if _sys.platform == "win32":  # pragma: no cover
    raise ImportError("sched-trigger needs unix sockets (Linux or macOS); Windows is not supported")

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._aclient import asubmit as asubmit
    from ._broker import BrokerThread as BrokerThread
    from ._broker import run_broker_in_thread as run_broker_in_thread
    from ._client import DIAL_TIMEOUT as DIAL_TIMEOUT
    from ._client import submit as submit
    from ._errors import AlreadyServing as AlreadyServing
    from ._errors import ConnectionLost as ConnectionLost
    from ._errors import NotASocket as NotASocket
    from ._errors import QueueClosed as QueueClosed
    from ._errors import QueueFull as QueueFull
    from ._errors import SendFailed as SendFailed
    from ._errors import SubmitCancelled as SubmitCancelled
    from ._errors import SubmitTimeout as SubmitTimeout
    from ._errors import TriggerError as TriggerError
    from ._errors import Unreachable as Unreachable
    from ._execute import execute as execute
    from ._job import CANCELLED_REASON as CANCELLED_REASON
    from ._job import TRIGGER_EXTERNAL as TRIGGER_EXTERNAL
    from ._job import Job as Job
    from ._job import Outcome as Outcome
    from ._listen import listen as listen
    from ._queue import Queue as Queue
    from ._server import Server as Server
    from ._wire import EVENT_DONE as EVENT_DONE
    from ._wire import EVENT_QUEUED as EVENT_QUEUED
    from ._wire import EVENT_STARTED as EVENT_STARTED
    from ._wire import Event as Event

    __version__: str

__all__ = [
    "CANCELLED_REASON",
    "DIAL_TIMEOUT",
    "EVENT_DONE",
    "EVENT_QUEUED",
    "EVENT_STARTED",
    "TRIGGER_EXTERNAL",
    "AlreadyServing",
    "BrokerThread",
    "ConnectionLost",
    "Event",
    "Job",
    "NotASocket",
    "Outcome",
    "Queue",
    "QueueClosed",
    "QueueFull",
    "SendFailed",
    "Server",
    "SubmitCancelled",
    "SubmitTimeout",
    "TriggerError",
    "Unreachable",
    "asubmit",
    "execute",
    "listen",
    "run_broker_in_thread",
    "submit",
]

# Everything loads on first use (PEP 562), so the client path stays light.
_LAZY = {
    "submit": "._client",
    "AlreadyServing": "._errors",
    "ConnectionLost": "._errors",
    "NotASocket": "._errors",
    "QueueClosed": "._errors",
    "QueueFull": "._errors",
    "SendFailed": "._errors",
    "SubmitCancelled": "._errors",
    "SubmitTimeout": "._errors",
    "TriggerError": "._errors",
    "Unreachable": "._errors",
    "EVENT_DONE": "._wire",
    "EVENT_QUEUED": "._wire",
    "EVENT_STARTED": "._wire",
    "Event": "._wire",
    "DIAL_TIMEOUT": "._client",
    "asubmit": "._aclient",
    "BrokerThread": "._broker",
    "run_broker_in_thread": "._broker",
    "execute": "._execute",
    "CANCELLED_REASON": "._job",
    "TRIGGER_EXTERNAL": "._job",
    "Job": "._job",
    "Outcome": "._job",
    "listen": "._listen",
    "Queue": "._queue",
    "Server": "._server",
}


# Hidden from type checkers, which would otherwise accept any attribute name.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        module = _LAZY.get(name)
        if module is not None:
            from importlib import import_module

            value = getattr(import_module(module, __name__), name)
            globals()[name] = value
            return value
        if name == "__version__":
            from importlib.metadata import version

            return version("sched-trigger")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


del TYPE_CHECKING  # a helper name, not an export


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "__version__"})
