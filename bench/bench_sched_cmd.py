"""How fast sched_cmd.run reacts to a stop, and that it never polls while it waits.

Three measurements, each against a floor measured in the same run:

1. **``set()`` to SIGTERM**: from the moment the stop event is set to the
   moment the child has its SIGTERM (the child blocks SIGTERM, takes it
   with ``sigwait`` and reports ``CLOCK_MONOTONIC``, the clock every process
   shares). Target: a median of at most 1 ms for ``run(stop=Event)``. The
   floor is another thread calling ``Popen.send_signal`` itself. Variants:
   the event set by a helper thread (``stop_on_signals`` does that), set by
   the main thread's own SIGTERM handler while ``run`` waits there, and
   ``arun``'s ``asyncio.Event``.
2. **stop to return**: from the stop request to ``run`` returning with the
   child (``sh -c 'echo ready; exec sleep'``, killed by SIGTERM) reaped,
   against a helper thread's ``send_signal`` while the main thread waits in
   ``select`` on the child's pidfd; a naive ``Popen.wait(timeout=0.05)``
   poller is shown for reference.
3. **no polling**: voluntary context switches of the whole process per
   second of waiting (``getrusage``: a run of ``sleep 2`` less a run of
   ``sleep 1``). Target: 0, however long the wait; the naive poller wakes
   over a hundred times a second (``Popen.wait(timeout=...)`` itself naps
   in growing steps).

Variants are interleaved round by round so drift hits them all alike.
Run: ``python bench/bench_sched_cmd.py [--quick] [--rounds N] [--output FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import select
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from _common import Report, count, divide, plural, seconds

import sched_cmd

#: set() to SIGTERM, median, seconds.
SIGNAL_TARGET = 0.001
#: Wake-ups per second of waiting.
POLL_TARGET = 0

# The child reports "ready", then the CLOCK_MONOTONIC time it got SIGTERM.
STAMP_CHILD = """
import os, signal, sys, time
fd = int(sys.argv[1])
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
os.write(fd, b"ready\\n")
signal.sigwait([signal.SIGTERM])
os.write(fd, repr(time.clock_gettime(time.CLOCK_MONOTONIC)).encode())
"""


def _now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def _stamp_child(fd: int) -> list[str]:
    return [sys.executable, "-I", "-S", "-c", STAMP_CHILD, str(fd)]


def _sh_child(fd: int) -> list[str]:
    return ["sh", "-c", f"echo ready >&{fd}; exec sleep 3600"]


def _await_ready(read_fd: int) -> None:
    ready, _, _ = select.select([read_fd], [], [], 30)
    if not ready or not os.read(read_fd, 6).startswith(b"ready"):
        raise RuntimeError("the child did not report ready")


def _received(read_fd: int) -> float:
    """The time the child got SIGTERM: it wrote it before it exited, so it is there."""
    return float(os.read(read_fd, 64))


def _with_pipe(measure: Callable[[int, int], float]) -> float:
    read_fd, write_fd = os.pipe()
    try:
        return measure(read_fd, write_fd)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def _after_ready(read_fd: int, action: Callable[[], None]) -> None:
    """In a helper thread: wait for the child's ready line, then act."""

    def wait_then_act() -> None:
        _await_ready(read_fd)
        action()

    threading.Thread(target=wait_then_act, daemon=True).start()


# --- 1. set() to SIGTERM -------------------------------------------------------------------


def signal_floor(read_fd: int, write_fd: int) -> float:
    """Another thread calls send_signal itself."""
    proc = subprocess.Popen(_stamp_child(write_fd), pass_fds=[write_fd])
    marks: list[float] = []

    def send() -> None:
        marks.append(_now())
        proc.send_signal(signal.SIGTERM)

    _after_ready(read_fd, send)
    proc.wait()
    return _received(read_fd) - marks[0]


def signal_run_helper(read_fd: int, write_fd: int) -> float:
    """run(stop=Event); a helper thread sets the event."""
    stop = threading.Event()
    marks: list[float] = []

    def set_stop() -> None:
        marks.append(_now())
        stop.set()

    _after_ready(read_fd, set_stop)
    sched_cmd.run(_stamp_child(write_fd), stop=stop, pass_fds=[write_fd])
    return _received(read_fd) - marks[0]


def signal_run_handler(read_fd: int, write_fd: int) -> float:
    """run(stop=Event) in the main thread; its SIGUSR1 handler sets the event."""
    stop = threading.Event()
    marks: list[float] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        marks.append(_now())
        stop.set()

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        _after_ready(read_fd, lambda: os.kill(os.getpid(), signal.SIGUSR1))
        sched_cmd.run(_stamp_child(write_fd), stop=stop, pass_fds=[write_fd])
    finally:
        signal.signal(signal.SIGUSR1, previous)
    return _received(read_fd) - marks[0]


def signal_arun(read_fd: int, write_fd: int) -> float:
    """arun(stop=asyncio.Event): set() in the event loop."""

    async def main() -> float:
        stop = asyncio.Event()
        task = asyncio.create_task(
            sched_cmd.arun(_stamp_child(write_fd), stop=stop, pass_fds=[write_fd])
        )
        await asyncio.to_thread(_await_ready, read_fd)
        mark = _now()
        stop.set()
        await task
        return mark

    mark = asyncio.run(main())
    return _received(read_fd) - mark


SIGNAL_FLOOR = "floor: another thread calls Popen.send_signal"
SIGNAL_OURS = "run(stop=Event): a helper thread sets it"
SIGNAL_VARIANTS: dict[str, Callable[[int, int], float]] = {
    SIGNAL_FLOOR: signal_floor,
    SIGNAL_OURS: signal_run_helper,
    "run(stop=Event): the main thread's signal handler sets it": signal_run_handler,
    "arun(stop=asyncio.Event)": signal_arun,
}


# --- 2. stop to return ---------------------------------------------------------------------


def return_floor(read_fd: int, write_fd: int) -> float:
    """A helper thread calls send_signal; the main thread waits in select on the pidfd."""
    proc = subprocess.Popen(_sh_child(write_fd), pass_fds=[write_fd])
    pidfd = os.pidfd_open(proc.pid)
    marks: list[float] = []

    def send() -> None:
        marks.append(time.perf_counter())
        proc.send_signal(signal.SIGTERM)

    try:
        _after_ready(read_fd, send)
        select.select([pidfd], [], [])
        proc.wait()
        return time.perf_counter() - marks[0]
    finally:
        os.close(pidfd)
        if proc.returncode is None:
            proc.kill()
            proc.wait()


def return_run(**options: object) -> Callable[[int, int], float]:
    """run(stop=...) stopped from a helper thread once the child is ready."""

    def measure(read_fd: int, write_fd: int) -> float:
        stop = threading.Event()
        marks: list[float] = []

        def set_stop() -> None:
            marks.append(time.perf_counter())
            stop.set()

        _after_ready(read_fd, set_stop)
        result = sched_cmd.run(_sh_child(write_fd), stop=stop, pass_fds=[write_fd], **options)  # type: ignore[arg-type]
        ended = time.perf_counter()
        if result.returncode != -signal.SIGTERM:
            raise RuntimeError(f"unexpected returncode {result.returncode}")
        return ended - marks[0]

    return measure


def return_arun(read_fd: int, write_fd: int) -> float:
    """arun(stop=asyncio.Event) from set() to the awaited result."""

    async def main() -> float:
        stop = asyncio.Event()
        task = asyncio.create_task(
            sched_cmd.arun(_sh_child(write_fd), stop=stop, pass_fds=[write_fd])
        )
        await asyncio.to_thread(_await_ready, read_fd)
        started = time.perf_counter()
        stop.set()
        await task
        return time.perf_counter() - started

    return asyncio.run(main())


def poll_50ms(read_fd: int, write_fd: int) -> float:
    """A naive runner: Popen.wait(timeout=0.05) in a loop, checking the stop event."""
    stop = threading.Event()
    marks: list[float] = []

    def set_stop() -> None:
        marks.append(time.perf_counter())
        stop.set()

    _after_ready(read_fd, set_stop)
    proc = subprocess.Popen(_sh_child(write_fd), pass_fds=[write_fd])
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


RETURN_FLOOR = "floor: another thread calls send_signal, pidfd select"
RETURN_VARIANTS: dict[str, Callable[[int, int], float]] = {
    RETURN_FLOOR: return_floor,
    "run(stop=Event)": return_run(),
    "run(stop=Event, capture_output=True)": return_run(capture_output=True),
    "run(stop=Event, kill_group=True)": return_run(kill_group=True),
    "arun(stop=asyncio.Event)": return_arun,
}
#: Measured after the others, not interleaved: its 50 ms naps let the CPUs
#: fall into deep idle states, which slows whatever runs next.
NAIVE = "naive: Popen.wait(timeout=0.05) loop"


# --- 3. wake-ups while waiting -------------------------------------------------------------


def _switches(wait: Callable[[float], None], seconds: float) -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
    wait(seconds)
    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - before


def wait_run(seconds: float) -> None:
    """run(["sleep", seconds], stop=Event) that is never set."""
    sched_cmd.run(["sleep", str(seconds)], stop=threading.Event())


def wait_naive(seconds: float) -> None:
    """The naive poller, never stopped."""
    stop = threading.Event()
    proc = subprocess.Popen(["sleep", str(seconds)])
    while True:
        try:
            proc.wait(timeout=0.05)
            return
        except subprocess.TimeoutExpired:
            if stop.is_set():
                proc.send_signal(signal.SIGTERM)


WAITS: dict[str, Callable[[float], None]] = {
    "run(stop=Event)": wait_run,
    NAIVE: wait_naive,
}


def wakeups_per_second(wait: Callable[[float], None], repeats: int) -> float:
    """Median over *repeats* of the switches a 2 s wait makes beyond a 1 s one."""
    extra = [_switches(wait, 2.0) - _switches(wait, 1.0) for _ in range(repeats)]
    return statistics.median(extra)


# --- the report ----------------------------------------------------------------------------


def measure_latencies(
    variants: dict[str, Callable[[int, int], float]], rounds: int
) -> dict[str, list[float]]:
    """Interleave *variants* for *rounds* rounds; return their latencies in seconds."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for variant in variants.values():  # warm-up: imports, threads, first spawns
        _with_pipe(variant)
    for _ in range(rounds):
        for name, variant in variants.items():
            samples[name].append(_with_pipe(variant))
    return samples


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _comparison(out: Report, samples: dict[str, list[float]], floor: str) -> None:
    medians = {name: statistics.median(values) for name, values in samples.items()}
    p90 = {name: seconds(_quantile(values, 0.9)) for name, values in samples.items()}
    out.comparison(medians, floor, extra={"p90": p90})


def report(
    signals: dict[str, list[float]],
    returns: dict[str, list[float]],
    wakeups: dict[str, float],
    rounds: int,
    options: list[str],
) -> Report:
    """The Markdown tables and the summary rows."""
    out = Report(
        "sched-cmd",
        __file__,
        options,
        f"{plural(rounds, 'interleaved round')} per variant; the baseline is the first row.",
    )
    ours = statistics.median(signals[SIGNAL_OURS])
    floor = statistics.median(signals[SIGNAL_FLOOR])
    target = f"≤ {seconds(SIGNAL_TARGET)} (median)"
    out.section("`stop.set()` to SIGTERM received")
    out.text("The child takes SIGTERM with `sigwait` and reports `CLOCK_MONOTONIC`.")
    _comparison(out, signals, SIGNAL_FLOOR)
    out.target("run(stop=Event)", target, ours <= SIGNAL_TARGET)
    out.summary("stop", seconds(ours), seconds(floor), divide(ours, floor), ours <= SIGNAL_TARGET)
    out.section("Stop to return")
    out.text(
        "Child `sh -c 'echo ready; exec sleep'` killed by SIGTERM; from the stop request "
        "to the call returning with the child reaped."
    )
    _comparison(out, returns, RETURN_FLOOR)
    out.section("Wake-ups while waiting")
    out.text(
        "Voluntary context switches of the whole process per second of waiting "
        "(a 2 s wait less a 1 s one, median)."
    )
    out.table(["variant", "wake-ups per second"], [[k, count(v)] for k, v in wakeups.items()])
    ours_wakes, naive = wakeups["run(stop=Event)"], wakeups[NAIVE]
    quiet = ours_wakes <= POLL_TARGET
    out.target("run(stop=Event)", f"{POLL_TARGET} wake-ups per second", quiet)
    out.summary("wakeups", count(ours_wakes), count(naive), divide(ours_wakes, naive), quiet)
    return out


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
    signals = measure_latencies(SIGNAL_VARIANTS, rounds)
    returns = measure_latencies(RETURN_VARIANTS, rounds)
    returns[NAIVE] = [_with_pipe(poll_50ms) for _ in range(max(5, rounds // 10))]
    repeats = 1 if args.quick else 3
    wakeups = {name: wakeups_per_second(wait, repeats) for name, wait in WAITS.items()}
    options = ["--quick"] if args.quick else [] if rounds == 200 else [f"--rounds {rounds}"]
    report(signals, returns, wakeups, rounds, options).write(args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
