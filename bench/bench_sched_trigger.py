"""Benchmark sched-trigger against hand-written floors, in one run.

Measures:

- round trips per second and p50/p99 latency of one request per connection
  (connect, send ``{}``, read ``queued``/``started``/``done``, close) with a
  no-op job, at 1, 8 and 64 concurrent clients, against the sched-trigger
  daemon (``Server`` + ``Queue`` + ``execute``) and against two minimal
  hand-written asyncio unix-socket servers doing the same exchange (streams
  and protocol), each on asyncio's loop and on uvloop. The daemon runs in its
  own process; the load generator is one client process on uvloop for every
  server, so the floors and sched-trigger meet the same clients.
- a sync run (a plain function, on the executor's worker thread) against an
  async run (a coroutine, on the loop), same daemon, same run: the sync run's
  round trip over the async run's, at 1, 8 and 64 clients, on both loops;
- one client's round trips per second while another connection dribbles a
  3.8 MB request 64 bytes at a time (every piece holding a newline and a
  closing quote), over the same client alone: framing costs linear time;
- the wall time of one ``sched-trigger`` CLI run against an idle daemon, beside
  a minimal hand-written socket+json client doing the same exchange; both run
  through this interpreter (a venv's python, never a pyenv shim).

Usage: ``python bench/bench_sched_trigger.py [--quick] [--output FILE]``
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import Report, count, divide, plural, ratio, seconds

SERVERS = (
    "sched-trigger",
    "sched-trigger, sync run",
    "floor: asyncio streams",
    "floor: asyncio protocol",
    "floor: protocol, one write",
    "floor: one write, thread hop",
)
#: What the sync-run daemon's round trip may cost over the async-run one's, same run.
SYNC_TARGET = 1.5
CONCURRENCY = (1, 8, 64)

QUEUED = b'{"event":"queued","ok":false}\n'
STARTED = b'{"event":"started","ok":false}\n'
DONE = b'{"event":"done","ok":true}\n'

MINIMAL_CLIENT = """\
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(b"{}\\n")
for line in s.makefile("rb"):
    event = json.loads(line)
    if event["event"] == "done":
        sys.exit(0 if event["ok"] else 1)
sys.exit(3)
"""


# --- the servers (run in a child process: ``--serve KIND LOOP PATH``) ------------------


async def serve_sched(path: str, *, sync: bool = False) -> None:
    from sched_trigger import Outcome, Queue, Server, execute, listen

    async def arun(stop: asyncio.Event, trigger: str, payload: object) -> Outcome:
        return Outcome(True)

    def srun(stop: Any, trigger: str, payload: object) -> Outcome:
        return Outcome(True)

    run: Any = srun if sync else arun
    queue: Queue[Any] = Queue(1024)
    stop = asyncio.Event()
    executor = asyncio.create_task(execute(queue, run, stop=stop))
    server: Server[Any] = Server(queue)
    serving = asyncio.create_task(server.serve(listen(path)))
    print("ready", flush=True)
    await asyncio.gather(executor, serving)


async def serve_streams(path: str) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        json.loads(await reader.readline())
        writer.write(QUEUED)
        writer.write(STARTED)
        writer.write(DONE)
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(handle, path, backlog=4096)
    print("ready", flush=True)
    await server.serve_forever()


class _FloorProtocol(asyncio.Protocol):
    """Each event is written as it is produced: three writes."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if b"\n" in self.buffer:
            json.loads(self.buffer)
            self.reply()
            self.transport.close()

    def reply(self) -> None:
        self.transport.write(QUEUED)
        self.transport.write(STARTED)
        self.transport.write(DONE)


class _OneWriteProtocol(_FloorProtocol):
    """The three events in one write: the fewest system calls the exchange allows."""

    def reply(self) -> None:
        self.transport.write(QUEUED + STARTED + DONE)


class _HopProtocol(_FloorProtocol):
    """The one-write floor with the job on another thread: the least a sync run can cost.

    After ``queued`` the connection is handed to a worker thread (a deque and a
    condition variable), which hands it back with ``call_soon_threadsafe``.
    """

    worker: _HopWorker

    def reply(self) -> None:
        self.transport.write(QUEUED)
        self.worker.put(self)

    def finish(self) -> None:
        self.transport.write(STARTED + DONE)
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if b"\n" in self.buffer:
            json.loads(self.buffer)
            self.reply()


class _HopWorker:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.items: collections.deque[_HopProtocol] = collections.deque()
        self.ready = threading.Condition()
        threading.Thread(target=self.run, daemon=True).start()

    def put(self, protocol: _HopProtocol) -> None:
        with self.ready:
            self.items.append(protocol)
            self.ready.notify()

    def run(self) -> None:
        while True:
            with self.ready:
                while not self.items:
                    self.ready.wait()
                protocol = self.items.popleft()
            self.loop.call_soon_threadsafe(protocol.finish)


async def serve_hop(path: str) -> None:
    _HopProtocol.worker = _HopWorker(asyncio.get_running_loop())
    await serve_protocol(path, _HopProtocol)


async def serve_protocol(path: str, protocol: type[asyncio.Protocol] = _FloorProtocol) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_unix_server(protocol, path, backlog=4096)
    print("ready", flush=True)
    await server.serve_forever()


async def serve_one_write(path: str) -> None:
    await serve_protocol(path, _OneWriteProtocol)


async def serve_sched_sync(path: str) -> None:
    await serve_sched(path, sync=True)


def serve(kind: str, loop: str, path: str) -> None:
    main = {
        "sched-trigger": serve_sched,
        "sched-trigger, sync run": serve_sched_sync,
        "floor: asyncio streams": serve_streams,
        "floor: asyncio protocol": serve_protocol,
        "floor: protocol, one write": serve_one_write,
        "floor: one write, thread hop": serve_hop,
    }[kind]
    factory = None
    if loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main(path))


# --- the load generator ---------------------------------------------------------------


@contextlib.contextmanager
def server_process(kind: str, loop: str) -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="stb") as tmp:
        path = str(Path(tmp) / "s.sock")
        child = subprocess.Popen(
            [sys.executable, __file__, "--serve", kind, loop, path],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            assert "ready" == child.stdout.readline().strip(), f"{kind} did not start"
            yield path
        finally:
            child.terminate()
            child.wait(30)
            if child.stdout is not None:
                child.stdout.close()


async def one_request(path: str) -> None:
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(b"{}\n")
    data = await reader.read()
    writer.close()
    assert data.endswith(b'"ok":true}\n'), data


async def load(path: str, clients: int, seconds: float) -> tuple[float, list[float]]:
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            await one_request(path)
            latencies.append(time.perf_counter() - began)

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return len(latencies) / (time.perf_counter() - began), latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure_throughput(
    loops: list[str], rounds: int, seconds: float
) -> dict[tuple[str, str, int], tuple[float, float, float]]:
    """(loop, server, clients) -> median over rounds of (rps, p50 ms, p99 ms)."""
    import uvloop

    samples: dict[tuple[str, str, int], list[tuple[float, float, float]]] = {}
    for _ in range(rounds):
        for loop in loops:
            for kind in SERVERS:  # the servers alternate within each round
                with (
                    server_process(kind, loop) as path,
                    asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner,
                ):
                    runner.run(load(path, 8, seconds / 4))  # warm-up
                    for clients in CONCURRENCY:
                        rps, lat = runner.run(load(path, clients, seconds))
                        samples.setdefault((loop, kind, clients), []).append(
                            (rps, percentile(lat, 0.5) * 1e3, percentile(lat, 0.99) * 1e3)
                        )
    return {
        key: (
            statistics.median(s[0] for s in values),
            statistics.median(s[1] for s in values),
            statistics.median(s[2] for s in values),
        )
        for key, values in samples.items()
    }


# --- a hostile connection ----------------------------------------------------------------

HOSTILE = b"[" + (b'"' + b"x" * 60 + b'",\n') * 60_000 + b'"last"]\n'


def dribble_forever(path: str, stop: threading.Event) -> int:
    """Send HOSTILE 64 bytes at a time, again and again, until *stop*; the requests sent."""
    sent = 0
    while not stop.is_set():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)
            sock.connect(path)
            for start in range(0, len(HOSTILE), 64):
                if stop.is_set():
                    return sent
                sock.sendall(HOSTILE[start : start + 64])
            sock.makefile("rb").read()
            sent += 1
    return sent


def measure_hostile(loop: str, rounds: int, seconds: float) -> tuple[float, float]:
    """Median round trips/s of one client alone, and beside a dribbling connection."""
    import uvloop

    alone: list[float] = []
    beside: list[float] = []
    with (
        server_process("sched-trigger", loop) as path,
        asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner,
    ):
        runner.run(load(path, 1, seconds / 4))  # warm-up
        for _ in range(rounds):
            alone.append(runner.run(load(path, 1, seconds))[0])
            stop = threading.Event()
            hostile = threading.Thread(target=dribble_forever, args=(path, stop))
            hostile.start()
            try:
                beside.append(runner.run(load(path, 1, seconds))[0])
            finally:
                stop.set()
                hostile.join()
    return statistics.median(alone), statistics.median(beside)


# --- the CLI ------------------------------------------------------------------------------


def cli_command() -> list[str]:
    script = Path(sys.executable).parent / "sched-trigger"
    if script.exists():
        return [sys.executable, str(script)]
    return [sys.executable, "-m", "sched_trigger"]


def wall(command: list[str]) -> float:
    began = time.perf_counter()
    done = subprocess.run(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
    )
    elapsed = time.perf_counter() - began
    assert 0 == done.returncode, command
    return elapsed


def measure_cli(runs: int) -> dict[str, float]:
    """Median wall time (ms) of one CLI run, and of the minimal client, interleaved."""
    times: dict[str, list[float]] = {"sched-trigger CLI": [], "minimal socket+json client": []}
    with server_process("sched-trigger", "asyncio") as path:
        commands: dict[str, list[str]] = {
            "sched-trigger CLI": [*cli_command(), path],
            "minimal socket+json client": [sys.executable, "-c", MINIMAL_CLIENT, path],
        }
        for command in commands.values():
            wall(command)  # warm the page cache
        for _ in range(runs):
            for name, command in commands.items():
                times[name].append(wall(command))
    bare = statistics.median(wall([sys.executable, "-c", "pass"]) for _ in range(max(runs // 2, 3)))
    result = {name: statistics.median(values) * 1e3 for name, values in times.items()}
    result["python -c pass"] = bare * 1e3
    return result


# --- the report --------------------------------------------------------------------------


def report(
    throughput: dict[tuple[str, str, int], tuple[float, float, float]],
    loops: list[str],
    cli: dict[str, float],
    options: list[str],
    hostile: dict[str, tuple[float, float]],
) -> Report:
    """The tables, through bench/_common.py's one report shape."""
    out = Report(
        "sched-trigger",
        __file__,
        options,
        "Medians over rounds, the servers alternating within each round. Round trips: one "
        "connection per request, no-op job, one client process on uvloop loading every "
        "server. A ratio is time per round trip over the baseline's (the baseline's "
        "throughput over the row's).",
    )
    base = "floor: asyncio streams"
    for loop in loops:
        out.section(f"Round trips, daemon on {loop}")
        out.text(
            f"The baseline of each client count is the {base} server on the same loop "
            "(target for sched-trigger with an async run: at most 1.25x, i.e. at least "
            "0.8 of its throughput)."
        )
        rows = []
        for clients in CONCURRENCY:
            floor = throughput[(loop, base, clients)][0]
            for kind in [base, *(k for k in SERVERS if k != base)]:
                rps, p50, p99 = throughput[(loop, kind, clients)]
                rows.append(
                    [
                        kind,
                        count(clients),
                        f"{count(rps)}/s",
                        seconds(p50 / 1e3),
                        seconds(p99 / 1e3),
                        ratio(divide(floor, rps)),
                    ]
                )
        out.table(["variant", "clients", "round trips", "p50", "p99", "ratio to baseline"], rows)
    ours = throughput[("asyncio", "sched-trigger", 1)][0]
    floor = throughput[("asyncio", base, 1)][0]
    out.summary(
        "round-trip", seconds(1 / ours), seconds(1 / floor), floor / ours, floor / ours <= 1.25
    )

    out.section("A sync run against an async run")
    out.text(
        "The same daemon, on each loop, with a plain-function no-op run (executed on the "
        "worker thread) and with a coroutine no-op run (on the loop, the baseline), same "
        "run. Ratio = the sync run's "
        "round trip over the async run's (the async run's throughput over the sync run's). "
        "The hop floor is the same ratio for the hand-written one-write server with and "
        "without one thread hop per request: what moving any job off the loop costs on "
        "this machine."
    )
    rows, missed, worst = [], [], (0.0, 0.0, 0.0)
    for loop in loops:
        for clients in CONCURRENCY:
            arps, ap50, _ = throughput[(loop, "sched-trigger", clients)]
            srps, sp50, _ = throughput[(loop, "sched-trigger, sync run", clients)]
            one_write = throughput[(loop, "floor: protocol, one write", clients)][0]
            hop = throughput[(loop, "floor: one write, thread hop", clients)][0]
            rows.append(
                [
                    loop,
                    count(clients),
                    f"{count(arps)}/s",
                    f"{count(srps)}/s",
                    seconds(ap50 / 1e3),
                    seconds(sp50 / 1e3),
                    ratio(one_write / hop),
                    f"**{ratio(arps / srps)}**",
                ]
            )
            if arps / srps > worst[0]:
                worst = (arps / srps, srps, arps)
            if round(arps / srps, 2) > SYNC_TARGET:
                missed.append(
                    f"{loop} at {plural(clients, 'client')} (hop floor {ratio(one_write / hop)})"
                )
    header = ["variant", "clients", "async run", "sync run", "async p50", "sync p50"]
    out.table([*header, "hop floor", "ratio to baseline"], rows)
    out.target("a sync run", f"≤ {SYNC_TARGET:.2f}x at every row", not missed)
    if missed:
        out.text(
            f"Missed in this run: {', '.join(missed)}. The sync run pays at least the hop "
            "floor (the worker thread's wake-up and one call back into the loop, with the "
            "GIL handed over both ways); under concurrent clients the loop thread also holds "
            "the GIL longer before the worker gets it, so the gap over the floor grows with "
            "the loop's own work per request."
        )
    value, sync_rps, async_rps = worst
    out.summary(
        "sync-async",
        seconds(1 / sync_rps),
        seconds(1 / async_rps),
        value,
        round(value, 2) <= SYNC_TARGET,
    )
    if "uvloop" in loops:
        gains = [
            f"{plural(c, 'client')}: "
            + ratio(
                throughput[("uvloop", "sched-trigger", c)][0]
                / throughput[("asyncio", "sched-trigger", c)][0]
            )
            for c in CONCURRENCY
        ]
        out.text(
            "sched-trigger on uvloop over sched-trigger on asyncio, as throughput: "
            + "; ".join(gains)
            + "."
        )

    out.section("Beside a hostile connection")
    out.text(
        "One client's round trips per second with a no-op async run, alone (the baseline) "
        "and while another connection dribbles a 3.8 MB request 64 bytes at a time through "
        "the smallest send buffer (every piece ends a line and a string). Framing looks at "
        "each byte once, so the dribbler costs the good client a share of one core, not the "
        "whole daemon."
    )
    out.table(
        ["variant", "alone", "beside the dribbler", "ratio to baseline"],
        [
            [loop, f"{count(alone)}/s", f"{count(beside)}/s", ratio(alone / beside)]
            for loop, (alone, beside) in hostile.items()
        ],
    )

    cli_ms, floor_ms = cli["sched-trigger CLI"], cli["minimal socket+json client"]
    out.section("One CLI run against an idle daemon")
    out.text("Wall time of a fresh process; the baseline is the minimal socket+json client.")
    out.comparison(
        {name: ms / 1e3 for name, ms in cli.items()},
        "minimal socket+json client",
        figure="wall time",
    )
    met = cli_ms / floor_ms <= 1.15
    out.target("the sched-trigger CLI", "≤ 1.15x", met)
    out.summary("cli", seconds(cli_ms / 1e3), seconds(floor_ms / 1e3), cli_ms / floor_ms, met)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--output", type=Path, help="also write the Markdown here")
    parser.add_argument(
        "--serve", nargs=3, metavar=("KIND", "LOOP", "PATH"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.serve:
        serve(*args.serve)
        return 0
    try:
        import uvloop  # noqa: F401
    except ImportError:
        sys.exit("bench_sched_trigger needs uvloop (bench/requirements.txt)")
    if shutil.which("pyenv") and "/.pyenv/shims/" in sys.executable:
        print("warning: running through a pyenv shim inflates process start-up", file=sys.stderr)
    loops = ["asyncio", "uvloop"]
    rounds, seconds, runs = (1, 0.3, 5) if args.quick else (3, 2.0, 40)
    throughput = measure_throughput(loops, rounds, seconds)
    hostile = {loop: measure_hostile(loop, rounds, seconds) for loop in loops}
    cli = measure_cli(runs)
    options = ["--quick"] if args.quick else []
    report(throughput, loops, cli, options, hostile).write(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
