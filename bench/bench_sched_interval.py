"""Benchmark sched_interval: import cost against its floors, and parse_interval throughput.

Run by ``nox -s bench`` (which passes ``--output docs/performance/interval.md``),
or by hand with a venv's python (never a pyenv shim: the shim adds ~95 ms per
start)::

    python bench/bench_sched_interval.py [--quick] [--output FILE]

Import cost is the median wall time of many fresh ``python -I`` interpreters,
started by this interpreter (``sys.executable``) and interleaved round by round
so that drift on a shared machine hits every row alike. Rows are compared with
the floor ``python -I -c pass`` and with ``python -I -c "import logging"``, the
import nearly every job runner pays anyway. Throughput is measured in this
process with ``time.perf_counter`` over batches of calls, median of rounds.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

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


def bench_imports(rounds: int) -> str:
    """Median start-up time per row, in interleaved rounds of fresh interpreters."""
    samples: dict[str, list[float]] = {label: [] for label, _ in IMPORT_ROWS}
    for _ in range(2):  # warm the page cache and .pyc files
        for _label, args in IMPORT_ROWS:
            _start_ms(args)
    for _ in range(rounds):
        for label, args in IMPORT_ROWS:
            samples[label].append(_start_ms(args))
    medians = {label: statistics.median(values) for label, values in samples.items()}
    fastest = {label: min(values) for label, values in samples.items()}
    bare = medians[IMPORT_ROWS[0][0]]
    with_logging = medians[IMPORT_ROWS[1][0]]
    lines = [
        f"### Import cost (median of {rounds} fresh interpreters per row)",
        "",
        "| what runs | median | added over bare | ratio to bare | added ÷ logging's added"
        " | fastest run, added over bare's |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, _ in IMPORT_ROWS:
        median = medians[label]
        added = median - bare
        share = added / (with_logging - bare) if with_logging > bare else float("nan")
        lines.append(
            f"| {label} | {median:.1f} ms | {added:+.1f} ms | {median / bare:.2f} | {share:.2f}"
            f" | {fastest[label] - fastest[IMPORT_ROWS[0][0]]:+.1f} ms |"
        )
    lines += [
        "",
        "The fastest run of each row is less disturbed by other load on a shared machine.",
    ]
    return "\n".join(lines)


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


def bench_importtime(rounds: int) -> str:
    """The interpreter's own account of each import, which other load disturbs less."""
    modules = ["logging", "sched_interval"]
    samples: dict[str, list[int]] = {m: [] for m in modules}
    for _ in range(rounds):
        for module in modules:
            samples[module].append(_importtime_us(module))
    medians = {m: statistics.median(v) for m, v in samples.items()}
    lines = [
        f"### `python -X importtime` cumulative import time (median of {rounds})",
        "",
        "| module | cumulative | ratio to `logging` |",
        "|---|---:|---:|",
    ]
    for module in modules:
        lines.append(
            f"| `{module}` | {medians[module] / 1000:.1f} ms"
            f" | {medians[module] / medians['logging']:.2f} |"
        )
    return "\n".join(lines)


def _rate(func: object, arg: str, batch: int, rounds: int) -> float:
    """Median calls per second of ``func(arg)`` over *rounds* batches."""
    call = func  # bound once; the loop below is the measured code
    rates = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(batch):
            call(arg)  # type: ignore[operator]
        rates.append(batch / (time.perf_counter() - start))
    return statistics.median(rates)


def bench_throughput(batch: int, rounds: int) -> str:
    """parse_interval calls per second against parse_duration alone and an empty call."""
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

    floor = _rate(empty, "30m", batch, rounds)
    lines = [
        f"### `parse_interval` throughput (median of {rounds} batches of {batch:,} calls)",
        "",
        f"An empty Python call runs at {floor:,.0f}/s on this machine.",
        "",
        "| raw value | `parse_duration` | `parse_interval` | ratio | with `bounds=('1m', '24h')` |",
        "|---|---:|---:|---:|---:|",
    ]
    for raw in ["30m", "1h30m15.5s", "", "off", "0", "-1h", "banana", "2562047h47m16.854775807s"]:
        d = _rate(duration, raw, batch, rounds)
        p = _rate(interval, raw, batch, rounds)
        b = _rate(bounded, raw, batch, rounds)
        lines.append(f"| `{raw!r}` | {d:,.0f}/s | {p:,.0f}/s | {p / d:.2f} | {b:,.0f}/s |")
    lines.append("")
    lines.append(
        "`-1h` and `banana` include logging one warning (to a `NullHandler`);"
        " ratio = `parse_interval` ÷ `parse_duration`."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--output", type=Path, help="also write the Markdown here")
    args = parser.parse_args()
    rounds, batch, batch_rounds = (5, 2_000, 3) if args.quick else (40, 20_000, 7)
    report = "\n".join(
        [
            "## sched-interval",
            "",
            f"Python {sys.version.split()[0]} on {sys.platform}, `{sys.executable}`."
            " Absolute times drift between runs and machines; the ratios carry over.",
            "",
            bench_imports(rounds),
            "",
            bench_importtime(rounds),
            "",
            bench_throughput(batch, batch_rounds),
            "",
            "Command: `python bench/bench_sched_interval.py"
            + (" --quick" if args.quick else "")
            + "` (or `nox -s bench`).",
            "",
        ]
    )
    sys.stdout.write(report)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
