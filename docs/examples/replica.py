"""A job that runs on several machines, one cycle at a time across all of them.

Every replica (a pod of a Deployment, a VM) runs the same program; they
coordinate through PostgreSQL with ``Exclusive.postgres``: one cycle runs at
a time across all of them, a request that finds a cycle running is queued for
the replica running it, and a replica that dies frees the lock with its
database session. This is the ``poll`` side: one cycle on demand. A resident
loop calls ``run_or_skip`` the same way on each tick.

Environment:
    JOB_POSTGRES: a libpq connection string; empty, libpq's ``PGHOST``,
        ``PGUSER``, ``PGDATABASE``... say where.
    JOB_NAME: the job's name across machines (default ``nightly-report``).
"""

from __future__ import annotations

import os
import sys

import sched_exclusive as exclusive


def build_report() -> str:
    """The slow, repeatable part of the cycle (a stand-in)."""
    return "42 rows"


def publish(report: str) -> None:
    """The irreversible part of the cycle (a stand-in: it prints)."""
    print(f"published: {report}", flush=True)


def cycle() -> None:
    """One run: build the report, then publish it only if the lock is still held.

    ``lock_lost()`` is set by the holder when its database session (and the
    lock with it) is gone, so the last look comes right before the step that
    cannot be undone.
    """
    lost = exclusive.lock_lost()
    report = build_report()
    if lost.is_set():
        raise RuntimeError("the cycle lock was lost: not publishing")
    publish(report)


def main() -> int:
    """Run one cycle here, or queue it behind the replica whose cycle is running."""
    ex = exclusive.Exclusive.postgres(
        os.environ.get("JOB_POSTGRES", ""), os.environ.get("JOB_NAME", "nightly-report")
    )
    try:
        outcome = ex.run(cycle)
    except exclusive.ExclusiveError as exc:
        print(f"poll: {exc.outcome}: {exc}", file=sys.stderr)
        # A request recorded before a later step failed still stands.
        return 0 if exc.outcome is exclusive.Outcome.QUEUED else 1
    print(f"poll: {outcome}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
