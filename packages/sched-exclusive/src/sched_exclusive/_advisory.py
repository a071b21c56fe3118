"""The advisory-lock key of a job name: stable, documented, computed client-side."""

from __future__ import annotations

__all__ = ["KEY_PREFIX", "advisory_key"]

#: What :func:`advisory_key` hashes before the name, so that sched-exclusive's
#: keys stay apart from other users of advisory locks in the same database.
KEY_PREFIX = b"sched-exclusive\x00"


def advisory_key(name: str) -> int:
    """The PostgreSQL advisory-lock key of ``name``, as `Exclusive.postgres` takes it.

    The first 8 bytes of SHA-256 over ``b"sched-exclusive\\x00"`` followed by
    ``name`` in UTF-8, read as a big-endian signed 64-bit integer: stable
    across versions of Python, PostgreSQL and this library (PostgreSQL's own
    ``hashtext`` is not), and the same on every machine. An operator finds
    the holder with ``SELECT pid FROM pg_locks WHERE locktype = 'advisory'
    AND objsubid = 1 AND classid = (key >> 32) & 0xFFFFFFFF AND objid = key
    & 0xFFFFFFFF`` (``python -m sched_exclusive status --postgres`` does).

    Args:
        name: the job's name.

    Returns:
        The key, a signed 64-bit integer (``-2**63`` to ``2**63 - 1``).
    """
    from hashlib import sha256

    digest = sha256(KEY_PREFIX + name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
