"""Benchmark what importing each package adds to an interpreter's start-up.

Run by ``nox -s bench`` (which passes ``--output docs/performance/imports.md``),
or by hand with a venv's python (never a pyenv shim: the shim adds ~95 ms per
start)::

    python bench/bench_imports.py [--quick] [--output FILE]

Each row is a fresh ``python -I`` interpreter (``sys.executable``, one
subprocess per run) that imports one package; the floor is ``python -I -c
pass`` in the same run. The rounds are interleaved, so drift on a shared
machine hits every row alike; each figure is a median. The design's budget is
20 ms over the floor for every package, the trigger client's path included
(which also loads no asyncio: ``sched-trigger``'s tests hold that, and
``tests-integration/test_import_cost.py`` names the modules each package may
load at import).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time

from _common import Report, plural, ratio, seconds

#: The design's budget: what importing one package may add to a bare start-up.
BUDGET = 0.020
FLOOR = "`python -I -c pass` (floor)"
ROWS: list[tuple[str, str]] = [
    (FLOOR, "pass"),
    *(
        (f"`import {name}`", f"import {name}")
        for name in (
            "sched_interval",
            "sched_loop",
            "sched_lock",
            "sched_exclusive",
            "sched_trigger",
            "sched_cmd",
        )
    ),
    ("`from sched_trigger import submit` (the client)", "from sched_trigger import submit"),
]


def _start(code: str) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of ``python -I -c code``, spawn to exit."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-I", "-c", code], check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _added(value: float) -> str:
    return f"+{seconds(value)}" if value >= 0 else f"−{seconds(-value)}"


def bench_imports(report: Report, rounds: int) -> None:
    """Median start-up per row, in interleaved rounds of fresh interpreters."""
    walls: dict[str, list[float]] = {label: [] for label, _ in ROWS}
    cpus: dict[str, list[float]] = {label: [] for label, _ in ROWS}
    for _ in range(2):  # warm the page cache and the .pyc files
        for _, code in ROWS:
            _start(code)
    for _ in range(rounds):
        for label, code in ROWS:
            wall, cpu = _start(code)
            walls[label].append(wall)
            cpus[label].append(cpu)
    medians = {label: statistics.median(values) for label, values in walls.items()}
    cpu = {label: statistics.median(values) for label, values in cpus.items()}
    added = {label: medians[label] - medians[FLOOR] for label in medians}
    report.section("Start-up time added by each import")
    report.text(
        f"Wall time of fresh interpreters, median of {plural(rounds, 'round')} per row, "
        "compared with the floor and with the budget of "
        f"{seconds(BUDGET)} over it. The CPU time the interpreter used (user + system) "
        "is shown beside it: other load on a shared machine stretches the wall time, "
        "hardly the CPU time."
    )
    report.table(
        ["variant", "median", "added over the floor", "CPU added", "ratio to baseline"],
        [
            [
                label,
                seconds(medians[label]),
                "— (the floor)" if label == FLOOR else _added(added[label]),
                "—" if label == FLOOR else _added(cpu[label] - cpu[FLOOR]),
                ratio(medians[label] / medians[FLOOR]),
            ]
            for label, _ in ROWS
        ],
    )
    worst = max((label for label, _ in ROWS if label != FLOOR), key=added.__getitem__)
    met = added[worst] <= BUDGET
    report.target("every import", f"≤ +{seconds(BUDGET)} over the floor", met)
    report.summary(
        "imports",
        f"{_added(added[worst])} ({worst.split('`')[1]})",
        seconds(medians[FLOOR]),
        medians[worst] / medians[FLOOR],
        met,
    )


def main() -> None:
    """Measure, print the tables, and write them with ``--output``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--output", help="write the Markdown tables to this file")
    args = parser.parse_args()
    rounds = 5 if args.quick else 41
    report = Report(
        "sched-*",
        __file__,
        ["--quick"] if args.quick else [],
        "One subprocess per run, rounds interleaved, medians; the floor is measured in the "
        "same run.",
        title="sched-*: import cost of every package",
    )
    bench_imports(report, rounds)
    report.write(args.output)


if __name__ == "__main__":
    main()
