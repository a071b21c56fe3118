"""What one :meth:`Exclusive.run` or :meth:`Exclusive.run_or_skip` call did."""

from __future__ import annotations

from enum import StrEnum, unique

__all__ = ["LOCK_NAME", "QUEUE_NAME", "Outcome"]

#: The flock(2) file inside the directory that serializes cycle runs.
LOCK_NAME = "cycle.lock"
#: The counter file inside the directory holding the number of queued rerun
#: requests, as decimal digits and a newline (``"1\n"``), as the Go library
#: writes it.
QUEUE_NAME = "cycle.queued"


@unique
class Outcome(StrEnum):
    """What a request did: the Go library's outcome names, as strings.

    The outcome stays meaningful alongside an error: every exception the
    coalescing calls raise carries it as ``.outcome`` (see
    :class:`ExclusiveError`).
    """

    #: Neither a run nor a queue entry: only ever carried by an error (the
    #: lock or the counter file could not be used).
    NONE = "none"
    #: This call took the cycle lock and ran the job.
    RAN = "ran"
    #: This call ran the job, then at least one queued rerun on top of it.
    RAN_QUEUED = "ran-queued"
    #: A cycle was in flight, so the request was recorded in the counter; the
    #: active runner (or, past its rerun cap, the next one) serves it.
    QUEUED = "queued"
    #: A cycle was in flight and the queue was full: the request was dropped,
    #: because the queued rerun(s) already start after it arrived.
    DISCARDED = "discarded"
    #: A cycle was in flight and the caller chose skip mode: nothing recorded.
    SKIPPED = "skipped"
    #: The gate was closed when the run was about to start: nothing ran and
    #: the counter was left as it was.
    GATED = "gated"
