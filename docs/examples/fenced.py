"""A replicated job whose writes are fenced: a stale cycle can never overwrite a newer one.

Two ways, one per target:

* ``publish_here``: the report goes to the database that coordinates the
  job, in one transaction that ``fence(conn)`` ties to the cycle: it commits
  before any later cycle of the job starts, or it is refused (``FencedOut``)
  and rolled back.
* ``publish_there``: the report goes to another store, which checks the
  cycle's ``fencing_token()`` itself: it keeps the largest token it has
  seen and refuses a write that carries a smaller one.

Environment:
    JOB_POSTGRES: a libpq connection string (the coordinating database);
        empty, libpq's ``PGHOST``, ``PGUSER``, ``PGDATABASE``... say where.
    JOB_NAME: the job's name across machines (default ``nightly-report``).
    JOB_STORE: where ``publish_there`` writes (default: ``JOB_POSTGRES``).
"""

from __future__ import annotations

import os
import sys

import psycopg

from sched_exclusive import Exclusive, ExclusiveError, FencedOut, fence, fencing_token

CONNINFO = os.environ.get("JOB_POSTGRES", "")
STORE = os.environ.get("JOB_STORE", CONNINFO)
REPORTS = """CREATE TABLE IF NOT EXISTS report (
    name text PRIMARY KEY,
    body text NOT NULL,
    fence bigint NOT NULL DEFAULT 0
)"""


def build_report() -> str:
    """The slow, repeatable part of the cycle (a stand-in)."""
    return "42 rows"


def publish_here() -> None:
    """Write the report to the coordinating database, fenced by this cycle."""
    report = build_report()
    with psycopg.connect(CONNINFO) as conn:  # not autocommit: one transaction
        try:
            with conn.transaction():
                token = fence(conn)  # FencedOut if a later cycle has started
                conn.execute(
                    "INSERT INTO report (name, body, fence) VALUES ('daily', %s, %s) "
                    "ON CONFLICT (name) DO UPDATE SET body = EXCLUDED.body, "
                    "fence = EXCLUDED.fence",
                    (report, token),
                )
        except FencedOut as exc:  # the transaction was rolled back
            print(f"not published: {exc}", file=sys.stderr, flush=True)
            raise
    print(f"published here: {report} (cycle {token})", flush=True)


def publish_there() -> None:
    """Write the report to another store, which refuses a stale cycle's token."""
    report = build_report()
    token = fencing_token()
    with psycopg.connect(STORE, autocommit=True) as store:
        written = store.execute(
            "UPDATE report SET body = %s, fence = %s WHERE name = 'daily' AND fence < %s",
            (report, token, token),
        ).rowcount
    if not written:
        raise RuntimeError(f"not published: a later cycle than {token} has written")
    print(f"published there: {report} (cycle {token})", flush=True)


def main() -> int:
    """One cycle on demand (``here`` or ``there``), or queued behind the running one."""
    with psycopg.connect(STORE, autocommit=True) as store:
        store.execute(REPORTS)
        store.execute("INSERT INTO report (name, body) VALUES ('daily', '') ON CONFLICT DO NOTHING")
    cycle = publish_there if sys.argv[1:] == ["there"] else publish_here
    ex = Exclusive.postgres(CONNINFO, os.environ.get("JOB_NAME", "nightly-report"))
    try:
        outcome = ex.run(cycle)
    except ExclusiveError as exc:
        causes = "; ".join(str(cause) for cause in getattr(exc, "exceptions", [exc]))
        print(f"poll: {exc.outcome}: {causes}", file=sys.stderr)
        return 1
    print(f"poll: {outcome}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
