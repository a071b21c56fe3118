"""Measure what a partition does to a PostgreSQL holder, with the library's defaults.

Usage (root, PostgreSQL and iproute2 installed)::

    python packages/sched-exclusive/tests/sched_exclusive_partition_bounds.py [ROUNDS]

For each way of cutting the link between a holder and a server that runs in a
network namespace of its own (both directions down; only the server's packets
to the holder dropped), a holder process runs one job that waits for
``lock_lost()``; the script cuts the link and records, from the cut:

* ``told``: when the job saw ``lock_lost()`` set;
* ``ended``: when the holder's call returned (or raised);
* ``freed``: when the server let a contender (on its unix socket) take the lock.

These are the figures ``docs/across-machines.md`` states. Nothing here is a test.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

from sched_exclusive_servers import Cluster, far_cluster  # beside this script: on sys.path
from sched_testing import Child

from sched_exclusive import advisory_key

HOLDER = """
import sys, time
from sched_exclusive import Exclusive, lock_lost
def job():
    lost = lock_lost()
    print("running", flush=True)
    lost.wait()
    print("told", repr(time.monotonic()), flush=True)
try:
    outcome = Exclusive.postgres(sys.argv[1], sys.argv[2]).run(job)
except Exception as exc:
    outcome = type(exc).__name__
print("ended", repr(time.monotonic()), outcome, flush=True)
"""


def cut(cluster: Cluster, how: str) -> list[str]:
    """Cut the link; return the command that heals it."""
    space = cluster.namespace
    assert space is not None
    if how == "both":
        space.cut()
        return ["ip", "link", "set", space.host_link, "up"]
    route = [*space.exec(), "ip", "route", "add", "blackhole", f"{space.host_address}/32"]
    subprocess.run(route, check=True)
    return [*space.exec(), "ip", "route", "del", "blackhole", f"{space.host_address}/32"]


def measure(cluster: Cluster, how: str) -> dict[str, float]:
    import psycopg

    name = f"bounds-{uuid.uuid4().hex[:8]}"
    holder = Child(HOLDER, cluster.far_dsn, name)
    try:
        assert holder.read_line() == "running"
        with psycopg.connect(cluster.dsn, autocommit=True) as contender:
            start = time.monotonic()
            heal = cut(cluster, how)
            try:
                freed = None
                while freed is None and time.monotonic() - start < 120:
                    row = contender.execute(
                        "SELECT pg_try_advisory_lock(%s)", (advisory_key(name),)
                    ).fetchone()
                    if row and row[0]:
                        freed = time.monotonic() - start
                    else:
                        time.sleep(0.05)  # sleep-ok: polling the server for the freed lock
                told = float(holder.read_line().split()[1]) - start
                ended = float(holder.read_line().split()[1]) - start
            finally:
                subprocess.run(heal, check=False)
        return {"told": told, "ended": ended, "freed": freed or float("nan")}
    finally:
        holder.reap()


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    with far_cluster() as cluster:
        for how in ("both", "server-to-client"):
            for _ in range(rounds):
                figures = measure(cluster, how)
                shown = ", ".join(f"{k} {v:.1f} s" for k, v in figures.items())
                print(f"{how}: {shown}", flush=True)


if __name__ == "__main__":
    main()
