"""``typing.final`` without importing ``typing`` at run time.

Importing ``typing`` costs about as much as the rest of this package put
together, and ``@final`` only speaks to type checkers, so at run time it is
a no-op here. ``TYPE_CHECKING`` is a local constant for the same reason;
type checkers treat any name ``TYPE_CHECKING`` as true.
"""

from __future__ import annotations

__all__ = ["TYPE_CHECKING", "final"]

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import final
else:

    def final(cls):
        """Return *cls* unchanged (``typing.final`` is a marker for type checkers)."""
        return cls
