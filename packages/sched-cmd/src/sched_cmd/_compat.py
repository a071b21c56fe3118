"""``typing.final`` without importing ``typing`` (about 7 ms, ``re`` included).

One source, several copies: each sched package that needs this module keeps
a byte-identical private copy. The source is ``tools/copied/_compat.py``;
``python tools/copies.py`` writes the copies, and a test fails when one
differs.

A process that only takes a lock or parses an interval should not pay for
the typing module. The decorator sets ``__final__`` exactly as
``typing.final`` does at run time, so a test can tell final classes apart;
type checkers see the real one. ``TYPE_CHECKING`` is a local constant for
the same reason: type checkers treat any name ``TYPE_CHECKING`` as true.
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
