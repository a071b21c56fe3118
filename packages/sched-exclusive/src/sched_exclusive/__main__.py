"""The operator CLI: ``python -m sched_exclusive status DIR [--json]``.

Exit status: 0 when the snapshot was taken (notes about the files go to
stderr), 1 when the directory or the counter file could not be read, 2 for a
usage error. It never blocks.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ._status import status


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI.

    Args:
        argv: the arguments after the program name; ``sys.argv[1:]`` if ``None``.

    Returns:
        The exit status.
    """
    parser = argparse.ArgumentParser(
        prog="python -m sched_exclusive",
        description="Inspect an Exclusive directory without taking its cycle lock.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser(
        "status",
        help="is a cycle running, since when, and how many requests are queued",
        description="Report whether a cycle is running (from /proc/locks), since when and "
        "for how long (from the holder line), and the queued-request count. "
        "The cycle lock is never taken, not even for an instant.",
    )
    show.add_argument("dir", help="the directory holding cycle.lock and cycle.queued")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    try:
        snapshot = status(args.dir)
    except OSError as exc:
        print(f"python -m sched_exclusive status: {exc}", file=sys.stderr)
        return 1
    for note in snapshot.notes:
        print(f"python -m sched_exclusive status: note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(snapshot.as_json()))
    else:
        print(snapshot.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
