"""Benchmarks for sched-loop: what an idle loop costs, and how late its ticks are.

Two measurements, each against its floor and peers in the same run:

1. **Idle cost.** A child process idles in a loop whose interval is one hour,
   for 10 s (2 s with ``--quick``). The parent reads the child's CPU time
   (``utime + stime`` from ``/proc/<pid>/stat``, in clock ticks) and its
   voluntary context switches (summed over ``/proc/<pid>/task/*/status``)
   after the child reports ready and again at the end. Compared: a bare
   ``threading.Event().wait(3600)`` (the floor), ``run_loop``, ``arun_loop``,
   APScheduler 3's ``BlockingScheduler`` and the ``schedule`` library's usual
   ``run_pending(); sleep(1)`` loop. Target: ``run_loop`` uses no CPU tick and
   wakes at most twice.
2. **Tick lateness at a 10 ms interval.** The gap between the starts of two
   consecutive runs, minus the interval, for ``run_loop`` against a bare
   ``Event.wait(0.01)`` loop (the floor), and for ``arun_loop`` against a bare
   asyncio ``timeout(0.01)`` around ``Event.wait()``; rounds alternate so
   drift hits both alike. Target: ``run_loop``'s median within 0.2 ms of the
   floor's.

Usage: ``python bench/bench_sched_loop.py [--quick] [--output FILE]``. Linux only
(it reads ``/proc``). Absolute figures drift between machines and runs; the
comparisons within one run are what carry over.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from _common import Report, count, divide, plural, ratio, seconds

from sched_loop import arun_loop, run_loop

INTERVAL = 0.01  # the lateness benchmark's tick, seconds
CLK_TCK = os.sysconf("SC_CLK_TCK")

# Each idle child sets up, prints "ready", then idles until killed.
IDLE_CHILDREN: dict[str, str] = {
    "floor: `threading.Event().wait(3600)`": """
        import threading
        print("ready", flush=True)
        while True:
            threading.Event().wait(3600)
    """,
    "`sched_loop.run_loop` (interval 1 h)": """
        from sched_loop import run_loop
        print("ready", flush=True)
        run_loop(lambda stop: None, 3600)
    """,
    "`sched_loop.arun_loop` (interval 1 h)": """
        import asyncio
        from sched_loop import arun_loop
        async def job(stop):
            pass
        async def main():
            print("ready", flush=True)
            await arun_loop(job, 3600)
        asyncio.run(main())
    """,
    "APScheduler 3 `BlockingScheduler` (interval 1 h)": """
        from apscheduler.schedulers.blocking import BlockingScheduler
        scheduler = BlockingScheduler()
        scheduler.add_job(lambda: None, "interval", hours=1)
        print("ready", flush=True)
        scheduler.start()
    """,
    "`schedule`: `run_pending(); sleep(1)` (every 1 h)": """
        import time
        import schedule
        schedule.every(1).hours.do(lambda: None)
        print("ready", flush=True)
        while True:
            schedule.run_pending()
            time.sleep(1)
    """,
}


@dataclass
class Usage:
    """A process's CPU clock ticks and voluntary context switches at one moment."""

    ticks: int
    switches: int

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.ticks - other.ticks, self.switches - other.switches)


def usage(pid: int) -> Usage:
    """Read utime + stime (every thread) and voluntary switches (summed over threads)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15
    switches = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                switches += int(line.split()[1])
    return Usage(ticks, switches)


def idle_cost(code: str, seconds: float) -> Usage | str:
    """Idle *code* in a child for *seconds* after it is ready; its usage meanwhile."""
    proc = subprocess.Popen(
        [sys.executable, "-u", "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            proc.kill()
            _, err = proc.communicate()
            last = err.strip().splitlines()[-1:] or ["no output"]
            return f"did not start: {last[0]}"
        time.sleep(0.5)  # let it settle into its wait after printing
        before = usage(proc.pid)
        time.sleep(seconds)
        return usage(proc.pid) - before
    finally:
        proc.kill()
        proc.communicate()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def gaps_to_lateness(starts: list[float]) -> list[float]:
    return [(b - a - INTERVAL) * 1e3 for a, b in itertools.pairwise(starts)]


def floor_thread(ticks: int) -> list[float]:
    """A bare Event.wait(0.01) loop: the start of each tick."""
    event = threading.Event()
    starts = [time.monotonic()]
    for _ in range(ticks):
        event.wait(INTERVAL)
        starts.append(time.monotonic())
    return gaps_to_lateness(starts)


def with_run_loop(ticks: int) -> list[float]:
    starts: list[float] = []
    stop = threading.Event()

    def job(stop: threading.Event) -> None:
        starts.append(time.monotonic())
        if len(starts) > ticks:
            stop.set()

    run_loop(job, INTERVAL, fire_on_start=True, stop=stop)
    return gaps_to_lateness(starts)


def floor_asyncio(ticks: int) -> list[float]:
    """A bare asyncio loop: timeout(0.01) around Event.wait()."""

    async def main() -> list[float]:
        event = asyncio.Event()
        starts = [time.monotonic()]
        for _ in range(ticks):
            try:
                async with asyncio.timeout(INTERVAL):
                    await event.wait()
            except TimeoutError:
                pass
            starts.append(time.monotonic())
        return starts

    return gaps_to_lateness(asyncio.run(main()))


def with_arun_loop(ticks: int) -> list[float]:
    starts: list[float] = []

    async def job(stop: asyncio.Event) -> None:
        starts.append(time.monotonic())
        if len(starts) > ticks:
            stop.set()

    async def main() -> None:
        await arun_loop(job, INTERVAL, fire_on_start=True, stop=asyncio.Event())

    asyncio.run(main())
    return gaps_to_lateness(starts)


def lateness(
    rounds: int, ticks: int, contenders: dict[str, Callable[[int], list[float]]]
) -> dict[str, list[float]]:
    """Alternate the contenders round by round; pool each one's lateness samples (ms)."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, measure in contenders.items():
            samples[name].extend(measure(ticks))
    return samples


IDLE_OURS = "`sched_loop.run_loop` (interval 1 h)"
LATENESS_FLOOR = "floor: bare `Event.wait(0.01)` loop"


def idle_table(report: Report, seconds_idle: float) -> None:
    results = {name: idle_cost(code, seconds_idle) for name, code in IDLE_CHILDREN.items()}
    floor = next(iter(results.values()))
    rows = []
    for name, result in results.items():
        if isinstance(result, str):
            rows.append([name, "—", "—", result, "—"])
            continue
        extra = str(result.switches - floor.switches) if isinstance(floor, Usage) else "—"
        cpu = seconds(result.ticks / CLK_TCK)
        rows.append([name, count(result.ticks), cpu, count(result.switches), extra])
    report.section("Idle with a one-hour interval")
    report.text(
        f"Each process idles {seconds(seconds_idle)} after it reports ready; CPU time is in "
        f"clock ticks of {seconds(1 / CLK_TCK)}. The baseline is the first row."
    )
    report.table(
        ["variant", "CPU ticks", "CPU time", "voluntary context switches", "more than baseline"],
        rows,
    )
    ours = results[IDLE_OURS]
    ok = isinstance(ours, Usage) and ours.ticks == 0 and ours.switches <= 2
    report.target("`run_loop`", "no CPU tick and at most 2 wake-ups", ok)
    if isinstance(ours, Usage) and isinstance(floor, Usage):
        report.summary(
            "idle",
            plural(ours.switches, "wake-up"),
            plural(floor.switches, "wake-up"),
            divide(ours.switches, floor.switches),
            ok,
        )


def lateness_table(report: Report, rounds: int, ticks: int) -> None:
    pairs = [
        (LATENESS_FLOOR, floor_thread),
        ("`run_loop`", with_run_loop),
        ("floor: bare asyncio `timeout(0.01)` + `Event.wait()`", floor_asyncio),
        ("`arun_loop`", with_arun_loop),
    ]
    samples = lateness(rounds, ticks, dict(pairs))
    report.section("Tick lateness at a 10 ms interval")
    report.text(
        f"{plural(rounds, 'round')} of {plural(ticks, 'tick')} each: how much later than "
        "the interval each tick starts. Each floor is the baseline of the row below it."
    )
    rows = []
    baseline = 0.0
    ok = False
    for name, _ in pairs:
        values = [ms / 1e3 for ms in samples[name]]
        median, p99 = statistics.median(values), percentile(values, 0.99)
        if name.startswith("floor"):
            baseline = median
            rows.append([name, seconds(median), seconds(p99), "—", ratio(1.0)])
            continue
        delta = median - baseline
        rows.append(
            [
                name,
                seconds(median),
                seconds(p99),
                f"{'+' if delta >= 0 else ''}{seconds(delta)}",
                ratio(divide(median, baseline)),
            ]
        )
        if name == "`run_loop`":
            ok = delta <= 0.0002
            report.summary(
                "lateness", seconds(median), seconds(baseline), divide(median, baseline), ok
            )
    report.table(["variant", "median", "p99", "median − baseline", "ratio to baseline"], rows)
    report.target("`run_loop`", "median within 0.2 ms of the floor", ok)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--output", type=Path, help="also write the Markdown here")
    args = parser.parse_args()
    if not Path("/proc/self/stat").exists():
        parser.error("this benchmark reads /proc: Linux only")
    idle_seconds, rounds, ticks = (2.0, 2, 50) if args.quick else (10.0, 5, 200)
    report = Report(
        "sched-loop",
        __file__,
        ["--quick"] if args.quick else [],
        "Idle cost is read from `/proc` for a child process; tick lateness is measured in "
        "this process, the variants alternating round by round.",
    )
    lateness_table(report, rounds, ticks)
    idle_table(report, idle_seconds)
    report.write(args.output)
    return 0  # a missed target is reported in the tables, not as a failed session


if __name__ == "__main__":
    sys.exit(main())
