"""The package's exception hierarchy.

``LoopError`` is the root of every error sched-loop raises. The only failure
the package itself detects is a bad argument, ``LoopConfigError``, which is
also a ``ValueError`` so that ``except ValueError`` keeps working. A job's own
exception is never wrapped: it propagates out of the loop unchanged.
"""

from __future__ import annotations

from typing import final


class LoopError(Exception):
    """Base class of every error raised by sched-loop."""

    __module__ = "sched_loop"  # shown and pickled under its public name


@final
class LoopConfigError(LoopError, ValueError):
    """An argument is out of range: a non-positive interval, a jitter outside [0, 1),
    a NaN or infinite duration or fraction, an empty signal list, or a signal
    helper entered outside the main thread.
    """

    __module__ = "sched_loop"
