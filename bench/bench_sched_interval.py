"""Benchmark sched_interval: import cost against its floors, and parse_interval throughput.

Run by ``nox -s bench`` (which passes ``--output docs/performance/sched_interval.md``),
or by hand with a venv's python (never a pyenv shim: the shim adds ~95 ms per
start)::

    python bench/bench_sched_interval.py [--quick] [--output FILE]

Import cost is the median wall time of many fresh ``python -I`` interpreters,
started by this interpreter (``sys.executable``) and interleaved round by round
so that drift on a shared machine hits every row alike. Rows are compared with
the floor ``python -I -c pass`` and with ``python -I -c "import logging"``, the
import nearly every job runner pays anyway. Throughput is measured in this
process with ``time.perf_counter`` over batches of calls, median of rounds, as
time per call against ``parse_duration`` of the same value.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from _common import Report, divide, plural, ratio, seconds

from sched_interval import parse_duration, parse_interval

IMPORT_ROWS: list[tuple[str, list[str]]] = [
    ("`python -I -c pass` (floor)", ["-c", "pass"]),
    ('`python -I -c "import logging"`', ["-c", "import logging"]),
    ("`import sched_interval`", ["-c", "import sched_interval"]),
    (
        "`import sched_interval` + `parse_interval('30m', timedelta)`",
        [
            "-c",
            "import datetime, sched_interval;"
            " sched_interval.parse_interval('30m', datetime.timedelta(hours=6))",
        ],
    ),
    (
        "`import sched_interval` + a warning (loads logging)",
        ["-c", "import sched_interval; sched_interval.parse_interval('banana', '6h')"],
    ),
    ("`python -I -m sched_interval 30m` (the CLI)", ["-m", "sched_interval", "30m"]),
]


def _start_ms(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-I", *args],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return (time.perf_counter() - start) * 1000


def bench_imports(report: Report, rounds: int) -> None:
    """Median start-up time per row, in interleaved rounds of fresh interpreters."""
    samples: dict[str, list[float]] = {label: [] for label, _ in IMPORT_ROWS}
    for _ in range(2):  # warm the page cache and .pyc files
        for _label, args in IMPORT_ROWS:
            _start_ms(args)
    for _ in range(rounds):
        for label, args in IMPORT_ROWS:
            samples[label].append(_start_ms(args) / 1000)
    medians = {label: statistics.median(values) for label, values in samples.items()}
    fastest = {label: min(values) for label, values in samples.items()}
    bare, logging_row = IMPORT_ROWS[0][0], IMPORT_ROWS[1][0]
    added = {label: medians[label] - medians[bare] for label in medians}
    report.section("Import cost")
    report.text(
        f"Wall time of fresh interpreters, median of {rounds} per variant. The time each "
        "variant adds to the floor (`python -I -c pass`) is compared with the time "
        "`import logging` adds, the import nearly every job runner pays anyway. The fastest "
        "run of each variant is less disturbed by other load on a shared machine."
    )
    order = [logging_row, *(label for label in medians if label != logging_row)]
    rows = [
        [
            label,
            seconds(medians[label]),
            "— (the floor)" if label == bare else f"+{seconds(added[label])}",
            "—" if label == bare else f"+{seconds(fastest[label] - fastest[bare])}",
            "—" if label == bare else ratio(divide(added[label], added[logging_row])),
        ]
        for label in order
    ]
    report.table(
        ["variant", "median", "added over the floor", "added, fastest runs", "ratio to baseline"],
        rows,
    )
    ours = IMPORT_ROWS[2][0]
    report.summary(
        "import",
        f"+{seconds(added[ours])}",
        f"+{seconds(added[logging_row])}",
        divide(added[ours], added[logging_row]),
    )


def _importtime_us(module: str) -> int:
    """The cumulative time ``-X importtime`` reports for importing *module* alone."""
    result = subprocess.run(
        [sys.executable, "-I", "-X", "importtime", "-c", f"import {module}"],
        check=True,
        capture_output=True,
        text=True,
    )
    total = 0
    for line in result.stderr.splitlines():
        # "import time:   self |  cumulative | name": top-level imports are not indented.
        parts = line.split("|")
        if len(parts) == 3 and parts[2].rstrip() == f" {module}":
            total += int(parts[1])
    return total


def bench_importtime(report: Report, rounds: int) -> None:
    """The interpreter's own account of each import, which other load disturbs less."""
    modules = ["logging", "sched_interval"]
    samples: dict[str, list[int]] = {m: [] for m in modules}
    for _ in range(rounds):
        for module in modules:
            samples[module].append(_importtime_us(module))
    report.section("`python -X importtime` cumulative import time")
    report.text(f"Median of {rounds} fresh interpreters per module.")
    report.comparison(
        {f"`import {m}`": statistics.median(v) / 1e6 for m, v in samples.items()},
        "`import logging`",
        figure="cumulative",
    )


def _per_call(func: Callable[[str], object], arg: str, batch: int, rounds: int) -> float:
    """Median seconds per call of ``func(arg)`` over *rounds* batches."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(batch):
            func(arg)
        times.append((time.perf_counter() - start) / batch)
    return statistics.median(times)


def bench_throughput(report: Report, batch: int, rounds: int) -> None:
    """parse_interval's time per call against parse_duration alone and an empty call."""
    quiet = logging.getLogger("bench_sched_interval")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    six_hours = timedelta(hours=6)

    def empty(raw: str) -> None:
        return None

    def interval(raw: str) -> object:
        return parse_interval(raw, six_hours, logger=quiet)

    def bounded(raw: str) -> object:
        return parse_interval(raw, six_hours, bounds=("1m", "24h"), logger=quiet)

    def duration(raw: str) -> object:
        try:
            return parse_duration(raw.strip())
        except ValueError:
            return None

    floor = _per_call(empty, "30m", batch, rounds)
    report.section("`parse_interval` per call")
    report.text(
        f"Median of {plural(rounds, 'batch', 'batches')} of {plural(batch, 'call')}. "
        f"The baseline is `parse_duration` of the same value; an empty Python call takes "
        f"{seconds(floor)} here. `-1h` and `banana` include logging one warning "
        "(to a `NullHandler`)."
    )
    rows = []
    for raw in ["30m", "1h30m15.5s", "", "off", "0", "-1h", "banana", "2562047h47m16.854775807s"]:
        d = _per_call(duration, raw, batch, rounds)
        p = _per_call(interval, raw, batch, rounds)
        b = _per_call(bounded, raw, batch, rounds)
        rows.append([f"`{raw!r}`", seconds(d), seconds(p), seconds(b), ratio(divide(p, d))])
        if raw == "30m":
            report.summary("parse", seconds(p), seconds(d), divide(p, d))
    report.table(
        [
            "raw value",
            "`parse_duration` (baseline)",
            "`parse_interval`",
            "with `bounds=('1m', '24h')`",
            "ratio to baseline",
        ],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--output", type=Path, help="also write the Markdown here")
    args = parser.parse_args()
    rounds, batch, batch_rounds = (5, 2_000, 3) if args.quick else (40, 20_000, 7)
    report = Report(
        "sched-interval",
        __file__,
        ["--quick"] if args.quick else [],
        "Start-up times are wall time of fresh `python -I` interpreters started by this one, "
        "interleaved round by round; per-call times are measured in this process.",
    )
    bench_imports(report, rounds)
    bench_importtime(report, rounds)
    bench_throughput(report, batch, batch_rounds)
    report.write(args.output)


if __name__ == "__main__":
    main()
