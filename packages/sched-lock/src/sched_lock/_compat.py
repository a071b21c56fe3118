"""``typing.final`` without importing ``typing`` (about 7 ms, ``re`` included).

A process that only takes a lock should not pay for the typing module. The
decorator sets ``__final__`` exactly as ``typing.final`` does at run time;
type checkers see the real one.
"""

from __future__ import annotations

__all__ = ["TYPE_CHECKING", "final"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import final
else:

    def final(cls):
        """Mark ``cls`` final, as ``typing.final`` does at run time."""
        cls.__final__ = True
        return cls
