"""The operator CLI.

* ``python -m sched_exclusive status DIR [--json]``: a directory's state.
* ``python -m sched_exclusive status --postgres CONNINFO NAME [--json]``: a job
  name's state in PostgreSQL (from ``pg_locks`` and its row).
* ``python -m sched_exclusive init-postgres CONNINFO``: create the table, for
  deployments whose runtime role may not create tables.

Exit status: 0 when the snapshot was taken or the table is ready (notes go to
stderr), 1 when the directory, the counter file or the database could not be
read or used, 2 for a usage error. ``status`` never takes the cycle lock and
never blocks for long.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ._status import format_rfc3339, format_seconds, status

PROG = "python -m sched_exclusive"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI.

    Args:
        argv: the arguments after the program name; ``sys.argv[1:]`` if ``None``.

    Returns:
        The exit status.
    """
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect an Exclusive without taking its cycle lock.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser(
        "status",
        help="is a cycle running, since when, and how many requests are queued",
        description="Report whether a cycle is running (from /proc/locks, or PostgreSQL's "
        "pg_locks with --postgres), since when and for how long, which process holds it, "
        "and the queued-request count. The cycle lock is never taken, not even for an "
        "instant.",
    )
    show.add_argument(
        "dir",
        metavar="DIR|NAME",
        help="the directory holding cycle.lock and cycle.queued; with --postgres, the job name",
    )
    show.add_argument(
        "--postgres", metavar="CONNINFO", help="read the job name's state from this database"
    )
    show.add_argument("--json", action="store_true", help="print one JSON object")
    init = commands.add_parser(
        "init-postgres",
        help="create the sched_exclusive table (idempotent)",
        description="Create the table Exclusive.postgres keeps its counters in, if it does "
        "not exist, as a role that may create tables; the runtime role then needs only "
        "SELECT, INSERT and UPDATE on it.",
    )
    init.add_argument("conninfo", metavar="CONNINFO", help="a libpq connection string or URI")
    args = parser.parse_args(argv)
    if args.command == "init-postgres":
        return _init_postgres(args.conninfo)
    if args.postgres is not None:
        return _postgres_status(args.postgres, args.dir, as_json=args.json)
    try:
        snapshot = status(args.dir)
    except OSError as exc:
        print(f"{PROG} status: {exc}", file=sys.stderr)
        return 1
    for note in snapshot.notes:
        print(f"{PROG} status: note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(snapshot.as_json()))
    else:
        print(snapshot.describe())
    return 0


def _init_postgres(conninfo: str) -> int:
    from ._pgpool import pool_for
    from ._postgres import init_table

    try:
        where = init_table(pool_for(conninfo))
    except OSError as exc:
        print(f"{PROG} init-postgres: {exc}", file=sys.stderr)
        return 1
    print(f"{where} is ready (grant SELECT, INSERT, UPDATE on it to the jobs' role)")
    return 0


def _postgres_status(conninfo: str, name: str, *, as_json: bool) -> int:
    from ._pgstatus import read_status

    try:
        snapshot = read_status(conninfo, name)
    except OSError as exc:
        print(f"{PROG} status: {exc}", file=sys.stderr)
        return 1
    for note in snapshot.notes:
        print(f"{PROG} status: note: {note}", file=sys.stderr)
    since = None if snapshot.since is None else format_rfc3339(snapshot.since)
    running_for = None if snapshot.running_for is None else format_seconds(snapshot.running_for)
    if as_json:
        print(
            json.dumps(
                {
                    "name": name,
                    "state": snapshot.state,
                    "since": since,
                    "running_for": running_for,
                    "running_for_seconds": snapshot.running_for,
                    "host": snapshot.host,
                    "pid": snapshot.pid,
                    "backend_pid": snapshot.backend_pid,
                    "pending": snapshot.pending,
                }
            )
        )
        return 0
    queued = f"{snapshot.pending} queued request{'' if snapshot.pending == 1 else 's'}"
    holder = "" if snapshot.host is None else f"host {snapshot.host}, pid {snapshot.pid}"
    if snapshot.state == "running":
        when = "" if since is None else f" since {since}"
        took = "" if running_for is None else f" (for {running_for})"
        print(f"{name}: running{when}{took}{', ' + holder if holder else ''}; {queued}")
    else:
        last = "" if since is None else f" (last cycle started {since} on {holder})"
        print(f"{name}: {snapshot.state}{last}; {queued}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
