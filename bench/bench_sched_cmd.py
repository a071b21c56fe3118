"""How long sched_cmd.run takes to return after a stop, against the raw floor.

The child is ``sh -c 'echo ready >&FD; exec sleep 3600'``: it reports on a
pipe once it runs, and exits on SIGTERM by the default action. Each round
starts one child, waits for its ``ready``, then measures from the moment the
stop is requested to the moment the call returns with the child reaped:

* **floor**: the topology ``run`` has (the stop comes from another thread
  while the caller is blocked) with the least machinery: a helper thread
  calls ``Popen.send_signal(SIGTERM)`` while the main thread waits in a
  ``select`` on the child's pidfd, then ``waitpid``;
* **floor, one thread**: ``send_signal``, ``select`` on the pidfd and
  ``waitpid`` in the same thread: no cross-thread wake-up at all (shown
  for reference: a blocked ``run`` cannot be stopped from its own thread);
* **run(stop=...)**: a helper thread sets the ``threading.Event`` the main
  thread's ``run`` waits on (the event hop is part of the cost measured);
* the same with ``capture_output=True`` and with ``kill_group=True``;
* **arun(stop=...)**: ``asyncio.Event.set()`` to the awaited result;
* **poll 50 ms**: what a runner built on ``Popen.wait(timeout=...)`` polling
  the stop event would cost (for reference; the design avoids it).

Variants are interleaved round by round so drift hits them all alike; the
naive poller runs last, on its own (a tenth of the rounds).
Run: ``python bench/bench_sched_cmd.py [--quick] [--rounds N] [--output FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import select
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import sched_cmd

TARGET = 1.5


def _child(fd: int) -> list[str]:
    return ["sh", "-c", f"echo ready >&{fd}; exec sleep 3600"]


def _await_ready(read_fd: int) -> None:
    ready, _, _ = select.select([read_fd], [], [], 30)
    if not ready or not os.read(read_fd, 64).startswith(b"ready"):
        raise RuntimeError("the child did not report ready")


def _with_pipe(measure: Callable[[int, int], float]) -> float:
    read_fd, write_fd = os.pipe()
    try:
        return measure(read_fd, write_fd)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def floor_threaded(read_fd: int, write_fd: int) -> float:
    """A helper thread calls send_signal; the main thread waits in select on the pidfd."""
    proc = subprocess.Popen(_child(write_fd), pass_fds=[write_fd])
    pidfd = os.pidfd_open(proc.pid)
    marks: list[float] = []

    def stopper() -> None:
        _await_ready(read_fd)
        marks.append(time.perf_counter())
        proc.send_signal(signal.SIGTERM)

    try:
        threading.Thread(target=stopper, daemon=True).start()
        select.select([pidfd], [], [])
        proc.wait()
        return time.perf_counter() - marks[0]
    finally:
        os.close(pidfd)
        if proc.returncode is None:
            proc.kill()
            proc.wait()


def floor(read_fd: int, write_fd: int) -> float:
    """send_signal + a select on the pidfd + waitpid, in one thread."""
    proc = subprocess.Popen(_child(write_fd), pass_fds=[write_fd])
    pidfd = os.pidfd_open(proc.pid)
    try:
        _await_ready(read_fd)
        started = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        select.select([pidfd], [], [])
        proc.wait()
        return time.perf_counter() - started
    finally:
        os.close(pidfd)
        if proc.returncode is None:
            proc.kill()
            proc.wait()


def _stop_after_ready(read_fd: int, marks: list[float]) -> threading.Event:
    stop = threading.Event()

    def wait_then_stop() -> None:
        _await_ready(read_fd)
        marks.append(time.perf_counter())
        stop.set()

    threading.Thread(target=wait_then_stop, daemon=True).start()
    return stop


def sched_run(**options: object) -> Callable[[int, int], float]:
    """run(stop=...) stopped from a helper thread once the child is ready."""

    def measure(read_fd: int, write_fd: int) -> float:
        marks: list[float] = []
        stop = _stop_after_ready(read_fd, marks)
        result = sched_cmd.run(_child(write_fd), stop=stop, pass_fds=[write_fd], **options)  # type: ignore[arg-type]
        ended = time.perf_counter()
        if result.returncode != -signal.SIGTERM:
            raise RuntimeError(f"unexpected returncode {result.returncode}")
        return ended - marks[0]

    return measure


def sched_arun(read_fd: int, write_fd: int) -> float:
    """arun(stop=asyncio.Event) from set() to the awaited result."""

    async def main() -> float:
        stop = asyncio.Event()
        task = asyncio.create_task(sched_cmd.arun(_child(write_fd), stop=stop, pass_fds=[write_fd]))
        await asyncio.to_thread(_await_ready, read_fd)
        started = time.perf_counter()
        stop.set()
        await task
        return time.perf_counter() - started

    return asyncio.run(main())


def poll_50ms(read_fd: int, write_fd: int) -> float:
    """A naive runner: Popen.wait(timeout=0.05) in a loop, checking the stop event."""
    marks: list[float] = []
    stop = _stop_after_ready(read_fd, marks)
    proc = subprocess.Popen(_child(write_fd), pass_fds=[write_fd])
    signalled = False
    while True:
        try:
            proc.wait(timeout=0.05)
            break
        except subprocess.TimeoutExpired:
            if stop.is_set() and not signalled:
                proc.send_signal(signal.SIGTERM)
                signalled = True
    return time.perf_counter() - marks[0]


FLOOR = "floor: another thread calls send_signal, pidfd select"
VARIANTS: dict[str, Callable[[int, int], float]] = {
    FLOOR: floor_threaded,
    "floor, one thread: send_signal, pidfd select": floor,
    "sched_cmd.run(stop=Event)": sched_run(),
    "sched_cmd.run(stop=Event, capture_output=True)": sched_run(capture_output=True),
    "sched_cmd.run(stop=Event, kill_group=True)": sched_run(kill_group=True),
    "sched_cmd.arun(stop=asyncio.Event)": sched_arun,
}
#: Measured after the others, not interleaved: its 50 ms naps let the CPUs
#: fall into deep idle states, which slows whatever runs next.
NAIVE = "naive: Popen.wait(timeout=0.05) loop"


def measure(rounds: int) -> dict[str, list[float]]:
    """Interleave the variants for *rounds* rounds; return their latencies in seconds."""
    samples: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for name, variant in VARIANTS.items():  # warm-up: imports, threads, first spawns
        _with_pipe(variant)
        del name
    for _ in range(rounds):
        for name, variant in VARIANTS.items():
            samples[name].append(_with_pipe(variant))
    samples[NAIVE] = [_with_pipe(poll_50ms) for _ in range(max(5, rounds // 10))]
    return samples


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(samples: dict[str, list[float]], rounds: int) -> str:
    """The Markdown tables."""
    base = statistics.median(samples[FLOOR])
    lines = [
        "# sched-cmd: time from stop to return",
        "",
        f"{rounds} interleaved rounds per variant; child `sh -c 'echo ready; exec sleep'` "
        f"killed by SIGTERM. Python {platform.python_version()}, {platform.system()} "
        f"{platform.release()}, {os.cpu_count()} CPUs. Target: run within {TARGET}x "
        "of the floor (median).",
        "",
        f"Ratios are to the first row, `{FLOOR}`.",
        "",
        "| variant | median | p90 | ratio to floor (median) |",
        "|---|---:|---:|---:|",
    ]
    for name, values in samples.items():
        median = statistics.median(values)
        lines.append(
            f"| {name} | {median * 1e6:.0f} µs | {_quantile(values, 0.9) * 1e6:.0f} µs "
            f"| {median / base:.2f}x |"
        )
    ours = statistics.median(samples["sched_cmd.run(stop=Event)"]) / base
    verdict = "meets" if ours <= TARGET else "misses"
    lines += ["", f"run(stop=Event) is {ours:.2f}x the floor: it {verdict} the {TARGET}x target."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Parse the options, measure, print (and write) the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a short smoke run (20 rounds)")
    parser.add_argument("--rounds", type=int, default=200, help="rounds per variant")
    parser.add_argument("--output", type=Path, help="also write the Markdown here")
    args = parser.parse_args(argv)
    if not hasattr(os, "pidfd_open"):
        print("this benchmark's floor needs os.pidfd_open (Linux 5.3+)", file=sys.stderr)
        return 1
    rounds = 20 if args.quick else args.rounds
    text = report(measure(rounds), rounds)
    print(text, end="")
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
