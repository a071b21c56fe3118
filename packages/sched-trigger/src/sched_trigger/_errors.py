"""The package's exception hierarchy, rooted in `TriggerError`.

This module is on the client's import path: it imports nothing but ``_compat``.
"""

from __future__ import annotations

from ._compat import final

__all__ = [
    "AlreadyServing",
    "ConnectionLost",
    "NotASocket",
    "QueueClosed",
    "QueueFull",
    "SendFailed",
    "SubmitCancelled",
    "SubmitTimeout",
    "TriggerError",
    "Unreachable",
    "final",
]

#: The message of `QueueFull`, which travels the wire verbatim as a rejection reason.
FULL_MESSAGE = "run queue is full"
#: The message of `QueueClosed`, which travels the wire verbatim as a rejection reason.
CLOSED_MESSAGE = "scheduler is shutting down"
#: What both sides say of a path that holds something other than a socket, with
#: ``ENOTSOCK`` and the path as the user gave it (the client's `Unreachable`).
NOT_A_SOCKET = "exists and is not a socket"


class TriggerError(Exception):
    """Base class of every error sched-trigger raises."""


@final
class QueueFull(TriggerError):
    """`Queue.submit` found the queue at capacity (Go's ``ErrFull``).

    Its message, ``run queue is full``, is the rejection reason a client receives.
    """

    def __init__(self, message: str = FULL_MESSAGE) -> None:
        super().__init__(message)


@final
class QueueClosed(TriggerError):
    """`Queue.submit` found the queue closed (Go's ``ErrClosed``).

    Its message, ``scheduler is shutting down``, is the rejection reason a client
    receives.
    """

    def __init__(self, message: str = CLOSED_MESSAGE) -> None:
        super().__init__(message)


@final
class Unreachable(TriggerError, ConnectionError):
    """The client could not connect to the daemon's socket (Go's ``ErrUnreachable``).

    ``errno`` and ``filename`` (the socket path) come from the failed connect.
    """


@final
class SendFailed(TriggerError, ConnectionError):
    """The client connected but could not send its request (Go's ``ErrSend``)."""


@final
class ConnectionLost(TriggerError, ConnectionError):
    """The connection ended before the final ``done`` event (Go's ``ErrConnectionLost``).

    The run may still happen, or may have happened, in the daemon.
    """


@final
class SubmitTimeout(TriggerError, TimeoutError):
    """The client's ``timeout`` elapsed before the final ``done`` event.

    The connection was closed, so the daemon saw the client leave; an accepted
    run still happens.
    """


@final
class SubmitCancelled(TriggerError):
    """The client's ``stop`` event was set before the final ``done`` event.

    The connection was closed, so the daemon saw the client leave; an accepted
    run still happens (Go's ``Submit`` returns the context's error likewise).
    """


@final
class AlreadyServing(TriggerError, OSError):
    """`listen` found a live daemon answering on the socket path (``EADDRINUSE``)."""


@final
class NotASocket(TriggerError, OSError):
    """`listen` found something that is not a socket at the path; it was left alone."""
