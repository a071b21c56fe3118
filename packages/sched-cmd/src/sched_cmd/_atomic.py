"""Descriptors that an exception from a signal handler cannot separate from their owner.

A Python-level signal handler runs in the main thread between two bytecodes,
and what it raises (``KeyboardInterrupt`` on Ctrl-C) surfaces there: as a
call returns, at a loop's backward jump, as a function starts. In
``fd = os.pipe()`` it can land after the pipe exists and before ``fd`` holds
it; in ``os.close(fd); fds.remove(fd)``, after the close and before the
owner forgets the number, which a later close would then take from whoever
reused it.

So each descriptor goes straight from the system call into its owner's list,
and leaves it straight into ``close``, with no bytecode in between: the
call, the store and the close all run in C (``list.extend`` consuming a
``map`` that makes the call). The callables given here must be built-ins
(``os.pipe``, ``os.pidfd_open``) or ``functools.partial`` objects of them.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Callable, Iterable
from itertools import chain, starmap

__all__ = ["close_all", "store", "store_each"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TypeVar

    T = TypeVar("T")


def store(owner: list[T], make: Callable[..., T], *args: object) -> None:
    """``owner.append(make(*args))``, with no point in between where an exception lands."""
    owner.extend(starmap(make, (args,)))


def store_each(owner: list[T], make: Callable[..., Iterable[T]], *args: object) -> None:
    """``owner.extend(make(*args))`` (``os.pipe``'s two ends), as `store` does."""
    owner.extend(chain.from_iterable(starmap(make, (args,))))


def close_all(fds: list[int]) -> None:
    """Close every descriptor in *fds*, emptying it: each is popped and closed in C.

    Raises:
        OSError: a close failed; that descriptor is gone from *fds*, the ones
            after it stay.
    """
    # pop() raises IndexError once the list is empty: that ends the loop.
    with contextlib.suppress(IndexError):
        deque(map(os.close, iter(fds.pop, None)), maxlen=0)
