"""Measurement helpers shared by the bench scripts (``python bench/bench_*.py``).

The scripts run with this folder as ``sys.path[0]``, so they import it as
``_common``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

Op = Callable[[], None]
Clock = Callable[[], float]


def filesystem_type(directory: str) -> str:
    """The type of the filesystem holding ``directory``, from /proc/mounts."""
    real = str(Path(directory).resolve())
    best, kind = "", "unknown"
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind
    for line in mounts:
        fields = line.split()
        point = fields[1].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best, kind = point, fields[2]
    return kind


def per_op(op: Op, count: int, clock: Clock = time.perf_counter) -> float:
    """Seconds of ``clock`` per operation over ``count`` calls."""
    start = clock()
    for _ in range(count):
        op()
    return (clock() - start) / count


def measure(
    ops: dict[str, Op], rounds: int, count: int, clock: Clock = time.perf_counter
) -> dict[str, float]:
    """Median seconds per operation of each op, rounds interleaved to share drift."""
    for op in ops.values():  # warm up: create files, fill caches
        per_op(op, max(count // 10, 10), clock)
    samples: dict[str, list[float]] = {name: [] for name in ops}
    for _ in range(rounds):
        for name, op in ops.items():
            samples[name].append(per_op(op, count, clock))
    return {name: statistics.median(values) for name, values in samples.items()}
