"""Measurement and report helpers shared by the bench scripts (``python bench/bench_*.py``).

The scripts run with this folder as ``sys.path[0]``, so they import it as
``_common``. ``docs/conf.py`` reads `SUMMARY` from here to draw the summary
table at the top of the performance page.

Every script reports the same way, through a `Report`:

- one title per package (``## sched-lock``), then one line saying what ran
  (`environment`: the interpreter's version, never its path) and the command;
- one heading level (``###``) for each measurement, titled by what it measures;
- tables of one shape: the variant in the first column, its figures (times
  through `seconds`, counts through `count`), then its ratio to the baseline
  row (`ratio`: the variant's time over the baseline's, so above 1.00x means
  slower), the baseline in the first row;
- a target, where there is one, as one line after its table (`Report.target`);
- the figures that matter written to ``<output>.summary.json`` beside the
  Markdown (`Report.summary`), one entry per `SUMMARY` row of the package.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

Op = Callable[[], None]
Clock = Callable[[], float]

# --- measurement ---------------------------------------------------------------------------


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


# --- the figures that matter: the performance page's summary -------------------------------


@dataclass(frozen=True)
class SummaryRow:
    """One row of the summary at the top of the performance page.

    Attributes:
        dist: The distribution measured, e.g. ``"sched-lock"``.
        key: What the script passes to `Report.summary` to fill the row.
        what: What is measured, and against which baseline.
        target: The target, as the page shows it (``"≤ 1.20x"``), or ``""``.
    """

    dist: str
    key: str
    what: str
    target: str = ""


#: The ratios that matter, in the order the page shows them. A row whose
#: script has not written it yet shows as "not measured yet".
SUMMARY: tuple[SummaryRow, ...] = (
    SummaryRow(
        "sched-*",
        "imports",
        "`import <package>` (the worst of the six, and the trigger client's path): "
        "start-up time added, against `python -I -c pass`",
        "≤ +20.0 ms",
    ),
    SummaryRow(
        "sched-interval",
        "import",
        "`import sched_interval`: start-up time added, against `import logging`'s",
    ),
    SummaryRow(
        "sched-interval",
        "parse",
        "`parse_interval('30m', …)` per call, against `parse_duration('30m')`",
    ),
    SummaryRow(
        "sched-loop",
        "idle",
        "`run_loop` idle for an hour-long interval: wake-ups, against `Event.wait(3600)`",
        "no CPU tick, ≤ 2 wake-ups",
    ),
    SummaryRow(
        "sched-loop",
        "lateness",
        "`run_loop` tick lateness at 10 ms (median), against a bare `Event.wait` loop",
        "≤ floor + 0.2 ms",
    ),
    SummaryRow(
        "sched-lock",
        "lock",
        "`try_lock` + `unlock`, against the same system calls by hand",
    ),
    SummaryRow(
        "sched-lock",
        "filelock",
        "`try_lock` + `unlock`, against filelock's `FileLock` acquire + release",
    ),
    SummaryRow(
        "sched-exclusive",
        "run",
        "`Exclusive.run` of a no-op, lock free, against the same system calls by hand",
    ),
    SummaryRow(
        "sched-exclusive",
        "postgres",
        "`Exclusive.postgres(…).run` of a no-op, against raw psycopg's same statements",
        "≤ 1.20x",
    ),
    SummaryRow(
        "sched-cmd",
        "stop",
        "`run(stop=Event)`: `set()` to SIGTERM received (median), "
        "against `Popen.send_signal` from another thread",
        "≤ 1 ms",
    ),
    SummaryRow(
        "sched-cmd",
        "wakeups",
        "`run(stop=Event)` waiting: wake-ups per second, against a `Popen.wait(0.05)` loop",
        "0",
    ),
    SummaryRow(
        "sched-trigger",
        "round-trip",
        "round trip with an async run on uvloop (worst of 1, 8, 64 clients), against the "
        "uvloop Protocol floor",
        "≤ 1.18x (≥ 0.85 of its throughput)",
    ),
    SummaryRow(
        "sched-trigger",
        "round-trip-asyncio",
        "round trip with an async run on asyncio (worst of 1, 8, 64 clients), against the "
        "asyncio Protocol floor",
        "≤ 1.11x (≥ 0.90 of its throughput)",
    ),
    SummaryRow(
        "sched-trigger",
        "sync",
        "round trip with a sync run on uvloop (worst of 1, 8, 64 clients), against the "
        "uvloop Protocol floor",
        "≤ 1.33x (≥ 0.75 of its throughput)",
    ),
    SummaryRow(
        "sched-trigger",
        "sync-asyncio",
        "round trip with a sync run on asyncio (worst of 1, 8, 64 clients), against the "
        "asyncio Protocol floor",
        "≤ 1.33x (≥ 0.75 of its throughput)",
    ),
    SummaryRow(
        "sched-trigger",
        "decode",
        "framing + decoding an 8 MiB request (worst of three shapes), against `json.loads`",
        "≤ 1.50x",
    ),
    SummaryRow(
        "sched-trigger",
        "beside-large",
        "a small round trip's p99 beside eight 8 MiB requests (uvloop), against it alone",
        "p99 ≤ 250 ms, no stall over 20 ms",
    ),
    SummaryRow(
        "sched-trigger",
        "cli",
        "one CLI run against an idle daemon, against a minimal socket+json client",
        "≤ 1.15x",
    ),
)


def summary_path(output: Path) -> Path:
    """Where the summary of a script writing ``output`` goes: ``<stem>.summary.json``."""
    return output.with_name(f"{output.stem}.summary.json")


# --- formatting ----------------------------------------------------------------------------


def environment() -> str:
    """What ran the measurements: ``Python 3.12.1 (CPython), Linux x86_64, 2 CPUs``.

    The interpreter's version and implementation, never its path (the page
    is published; the build machine's folders are nobody's business).
    """
    return (
        f"Python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.system()} {platform.machine()}, {plural(os.cpu_count() or 1, 'CPU')}"
    )


def plural(number: float, word: str, words: str | None = None) -> str:
    """``1 client``, ``8 clients``, ``2,000 calls``: a count with its noun agreed."""
    noun = word if number == 1 else (words or f"{word}s")
    return f"{count(number)} {noun}"


def count(number: float) -> str:
    """A count or a rate: whole, with thousands separators (``12,419``)."""
    return f"{number:,.0f}"


def seconds(value: float) -> str:
    """A duration with three significant digits in the unit that suits it.

    ``5.67 µs``, ``817 µs``, ``50.7 ms``, ``1.20 s``; zero is ``0 s``.
    """
    if value == 0:
        return "0 s"
    for scale, unit in ((1e-6, "ns"), (1e-3, "µs"), (1.0, "ms")):
        if abs(value) < scale * 0.9995:
            return f"{_three(value / scale * 1e3)} {unit}"
    return f"{_three(value)} s"


def _three(value: float) -> str:
    """``value`` to three significant digits (at least the units)."""
    if value == 0:
        return "0"
    digits = 2 if abs(value) < 9.995 else 1 if abs(value) < 99.95 else 0
    return f"{value:,.{digits}f}"


def ratio(value: float | None) -> str:
    """A ratio of two figures: ``1.14x``; ``—`` where there is none (0 over 0)."""
    return "—" if value is None else f"{value:.2f}x"


def divide(figure: float, baseline: float) -> float | None:
    """``figure / baseline``, or None where the baseline is 0."""
    return figure / baseline if baseline else None


# --- the report ----------------------------------------------------------------------------


class Report:
    """A package's Markdown tables, and its rows of the summary.

    Args:
        dist: The distribution measured, e.g. ``"sched-lock"``; the title.
        script: The script's ``__file__``: the command line names it.
        options: The options given that change what is measured (``--quick``).
        method: How the figures were taken (rounds, clock, baseline), one
            sentence or more.
        title: The title, where it is more than the distribution's name.
    """

    def __init__(
        self,
        dist: str,
        script: str,
        options: Sequence[str],
        method: str,
        *,
        title: str | None = None,
    ) -> None:
        self.dist = dist
        self.command = " ".join(["python", f"bench/{Path(script).name}", *options])
        self.lines: list[str] = [
            f"## {title or dist}",
            "",
            f"{environment()}. Command: `{self.command}`.",
            "",
            method,
            "",
        ]
        self.rows: dict[str, dict[str, object]] = {}

    def section(self, title: str) -> None:
        """Start a measurement: ``### title``."""
        self.lines += [f"### {title}", ""]

    def text(self, *paragraph: str) -> None:
        """A paragraph (the pieces joined by spaces)."""
        self.lines += [" ".join(paragraph), ""]

    def table(self, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        """A table: the first column left-aligned, the figures right-aligned."""
        self.lines.append("| " + " | ".join(header) + " |")
        self.lines.append("|---|" + "---:|" * (len(header) - 1))
        self.lines += ["| " + " | ".join(row) + " |" for row in rows]
        self.lines.append("")

    def comparison(
        self,
        results: dict[str, float],
        baseline: str,
        *,
        figure: str = "median",
        extra: dict[str, dict[str, str]] | None = None,
    ) -> None:
        """The usual table: each variant's time and its ratio to the baseline's.

        Args:
            results: Seconds per variant, the table's rows in order.
            baseline: The row the ratios divide by; shown first.
            figure: The heading of the time column.
            extra: More columns, between the time and the ratio: heading to
                the cell of each variant.
        """
        extra = extra or {}
        order = [baseline, *(name for name in results if name != baseline)]
        rows = [
            [
                name,
                seconds(results[name]),
                *(cells[name] for cells in extra.values()),
                ratio(divide(results[name], results[baseline])),
            ]
            for name in order
        ]
        self.table(["variant", figure, *extra, "ratio to baseline"], rows)

    def target(self, what: str, target: str, met: bool) -> None:
        """The verdict line after a table: ``Target for …: … — **met**.``"""
        self.text(f"Target for {what}: {target} — **{'met' if met else 'missed'}**.")

    def summary(
        self,
        key: str,
        sched: str,
        baseline: str,
        value: float | None,
        met: bool | None = None,
    ) -> None:
        """Fill this package's `SUMMARY` row ``key``.

        Args:
            key: The row's key in `SUMMARY`.
            sched: sched's figure, formatted (`seconds`, `count`).
            baseline: The baseline's figure, formatted.
            value: The ratio, sched's time over the baseline's (None: 0 over 0).
            met: Whether the row's target is met; None where it has none.

        Raises:
            KeyError: ``key`` is no row of this package in `SUMMARY`.
        """
        if not any(row.dist == self.dist and row.key == key for row in SUMMARY):
            raise KeyError(f"no summary row {key!r} for {self.dist} in bench/_common.py")
        value = None if value is None else round(value, 4)
        self.rows[key] = {"sched": sched, "baseline": baseline, "ratio": value, "met": met}

    def write(self, output: Path | str | None) -> str:
        """Print the Markdown; with ``output``, write it there and the summary beside it."""
        text = "\n".join(self.lines).rstrip("\n") + "\n"
        print(text, end="")
        if output is not None:
            path = Path(output)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            record = {
                "dist": self.dist,
                "command": self.command,
                "environment": environment(),
                "rows": self.rows,
            }
            summary_path(path).write_text(
                json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
            )
        return text
