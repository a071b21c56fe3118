"""Hostile or odd bytes on real sockets: the daemon stays responsive, bounded and quiet.

Items here are bounded-time tests: each bound is generous for the behaviour
under test (linear work, a paced warning) and far below what the quadratic or
flooding behaviour they guard against takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
from sched_trigger_testkit import (
    DEADLINE,
    LOOPS,
    Gate,
    daemon,
    read_line,
    run_async,
)

from sched_trigger import Outcome, submit

QUEUED = b'{"event":"queued","ok":false}\n'
STARTED = b'{"event":"started","ok":false}\n'
UNDECODABLE = b'{"event":"done","reason":"undecodable request","ok":false}\n'
CLOSED = b'{"event":"done","reason":"scheduler is shutting down","ok":false}\n'


async def count_run(stop: asyncio.Event, trigger: str, payload: Any) -> Outcome:
    """Report how many elements the request held."""
    return Outcome(True, str(len(payload)))


def dribble(path: str, request: bytes, piece: int) -> list[bytes]:
    """Send *request* a few bytes per write through the smallest send buffer the kernel
    allows, so the server reads it in tiny pieces; return the lines it answers."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)  # the kernel's minimum
        sock.settimeout(DEADLINE)
        sock.connect(path)
        for start in range(0, len(request), piece):
            sock.sendall(request[start : start + piece])
        return sock.makefile("rb").readlines()


@pytest.mark.parametrize("loop", LOOPS)
def test_a_request_dribbled_in_tiny_writes_is_framed_in_linear_time(loop: str) -> None:
    """Bounded time: 3.8 MB arriving 64 bytes at a time, every piece holding a newline and a
    closing quote, is answered within seconds (re-parsing the buffer per piece took ~20 s)."""
    element = b'"' + b"x" * 60 + b'",\n'
    request = b"[" + element * 60_000 + b'"last"]\n'

    async def scenario() -> tuple[list[bytes], float]:
        async with daemon(count_run) as d:
            began = time.monotonic()
            lines = await asyncio.to_thread(dribble, d.path, request, 64)
            return lines, time.monotonic() - began

    lines, elapsed = run_async(scenario(), loop)
    assert [QUEUED, STARTED, b'{"event":"done","reason":"60001","ok":true}\n'] == lines
    assert elapsed < 5.0


@pytest.mark.parametrize("loop", LOOPS)
def test_whitespace_counts_against_the_cap_and_is_refused_past_it(loop: str) -> None:
    """A stream of spaces is refused as soon as it passes the size cap, while the client is
    still sending: it no longer waits for the read bound."""
    cap = 64 * 1024

    async def scenario() -> bytes:
        async with daemon(max_request_size=cap, read_timeout=4 * DEADLINE) as d:
            reader, writer = await asyncio.open_unix_connection(d.path)
            try:
                writer.write(b" " * (cap + 1))  # never a value, never EOF
                return await read_line(reader)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()

    assert UNDECODABLE == run_async(scenario(), loop)


def _stuff(sock: socket.socket, limit: int) -> int:
    """Write to non-blocking *sock* until the kernel stops taking bytes (or *limit*)."""
    sent = 0
    chunk = b" " * 65536
    while sent < limit:
        try:
            sent += sock.send(chunk)
        except BlockingIOError:
            # The peer may still be reading: give it a moment to make room.
            # sleep-ok: a bound on waiting for room that never comes, not an ordering device
            ready = select.select([], [sock], [], 0.5)[1]
            if not ready:
                return sent
    return sent


def _until_done(sock: socket.socket) -> bytes:
    """Read until the done line (the server then closes on unread bytes: a reset follows)."""
    received = b""
    while b'"done"' not in received:
        received += sock.recv(4096)
    return received


@pytest.mark.parametrize("loop", LOOPS)
def test_nothing_after_the_request_is_read(loop: str) -> None:
    """Once the request is framed the server stops reading: what a client sends after it
    fills the socket buffers and stops there (the server used to read it all: GiBs)."""
    limit = 64 * 1024 * 1024

    async def scenario() -> tuple[int, bytes]:
        gate = Gate()
        async with daemon(gate) as d:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(DEADLINE)
                await asyncio.to_thread(sock.connect, d.path)
                await asyncio.to_thread(sock.sendall, b"{}\n")
                await asyncio.wait_for(gate.started.get(), DEADLINE)
                sock.setblocking(False)
                sent = await asyncio.to_thread(_stuff, sock, limit)
                sock.settimeout(DEADLINE)
                gate.release.set()
                received = await asyncio.to_thread(_until_done, sock)
                return sent, received
            finally:
                sock.close()

    sent, received = run_async(scenario(), loop)
    assert sent < 8 * 1024 * 1024  # the socket buffers, not the 64 MiB offered
    assert received.endswith(b'"reason":"released","duration_ms":1,"ok":true}\n')


@pytest.mark.parametrize("loop", LOOPS)
def test_close_cuts_short_a_connection_still_reading(loop: str) -> None:
    """Shutdown is bounded by the app: a client still sending its request is answered
    'scheduler is shutting down' and closed at once, not after the read bound."""

    async def scenario() -> list[bytes]:
        async with daemon(read_timeout=4 * DEADLINE) as d:
            reader, writer = await asyncio.open_unix_connection(d.path)
            writer.write(b'{"repos": ')
            await writer.drain()
            # A later connection's full exchange: the server accepts in arrival order,
            # so by its end the first connection is being read.
            assert 3 == len(await asyncio.to_thread(lambda: _exchange_lines(d.path)))
            d.server.close()
            await asyncio.wait_for(d.server.wait(), DEADLINE)
            try:
                return [await read_line(reader), await read_line(reader)]
            finally:
                writer.close()

    assert [CLOSED, b""] == run_async(scenario(), loop)


def _exchange_lines(path: str) -> list[bytes]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(DEADLINE)
        sock.connect(path)
        sock.sendall(b"{}\n")
        return sock.makefile("rb").readlines()


# --- running out of file descriptors -----------------------------------------------------


def readline_within(stream: Any, seconds: float) -> str:
    """One line from a child's pipe, or "" if none came within *seconds* (a bound)."""
    if not select.select([stream], [], [], seconds)[0]:
        return ""
    return str(stream.readline()).strip()


EMFILE_DAEMON = textwrap.dedent(
    """
    import asyncio, logging, os, resource, sys, time
    from sched_trigger import Outcome, Queue, Server, execute, listen

    path, loop_name = sys.argv[1], sys.argv[2]
    records = []

    class Count(logging.Handler):  # accept trouble, from any logger
        def emit(self, record):
            if "accept" not in record.getMessage():
                return
            records.append(time.monotonic())
            if len(records) == 1:
                print("accept failed", flush=True)

    logging.getLogger().addHandler(Count(logging.WARNING))

    async def run(stop, trigger, payload):
        return Outcome(True)

    async def main():
        loop = asyncio.get_running_loop()
        queue = Queue(16)
        stop = asyncio.Event()
        executor = asyncio.create_task(execute(queue, run, stop=stop))
        server = Server(queue, read_timeout=600)
        serving = asyncio.create_task(server.serve(listen(path)))
        # sleep-ok: one zero-length yield: the server task starts serving
        await asyncio.sleep(0)
        spare = len(os.listdir("/proc/self/fd")) + 8
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (spare, hard))
        print("ready", flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)  # the parent says when
        server.close()
        queue.close()
        await executor
        await server.wait()
        span = records[-1] - records[0] if records else 0
        print(f"records {len(records)} span {span:.3f}", flush=True)

    factory = None
    if loop_name == "uvloop":
        import uvloop
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())
    """
)


@pytest.mark.parametrize("loop", LOOPS)
def test_accept_errors_are_paced_and_serving_resumes(loop: str) -> None:
    """Out of descriptors, the server logs 'trigger socket accept failed' at most once a
    second (asyncio's accept loop logged thousands of errors a second; uvloop closed the
    server without a word) and serves a normal client again once descriptors are free."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="st") as tmp:
        path = f"{tmp}/d.sock"
        idle: list[socket.socket] = []
        with subprocess.Popen(
            [sys.executable, "-u", "-c", EMFILE_DAEMON, path, loop],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as child:
            try:
                assert child.stdin is not None
                assert child.stdout is not None
                assert "ready" == child.stdout.readline().strip()
                for _ in range(12):  # more idle connections than the daemon has descriptors
                    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    sock.connect(path)
                    idle.append(sock)
                assert "accept failed" == readline_within(child.stdout, DEADLINE)
                for sock in idle:
                    sock.close()
                final = submit(path, {}, timeout=DEADLINE)
                assert final.ok
                child.stdin.write("stop\n")
                child.stdin.flush()
                words = child.stdout.readline().split()
                assert 0 == child.wait(DEADLINE)
            finally:
                for sock in idle:
                    sock.close()
                if child.poll() is None:
                    child.kill()
                    child.wait()
    count, span = int(words[1]), float(words[3])
    assert 1 <= count <= span + 2  # one warning, then at most one a second
