"""Shared helpers for sched-trigger's tests: a daemon harness, raw clients, models.

Hypothesis strategies live here too, so every suite draws from the same ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, final

import pytest
import sched_testing
from hypothesis import strategies as st

from sched_trigger import Outcome, Queue, Server, execute, listen

DEADLINE = 30.0
"""A generous upper bound for anything a test waits on; never the thing under test."""


@dataclass
class Payload:
    """The payload type the daemon tests decode into."""

    repos: list[str] = field(default_factory=list)
    note: str = ""


# Shared with every suite (testing/sched_testing.py), under the names these tests use.
socket_dir = sched_testing.socket_dir
open_fds = sched_testing.open_fds


# --- an asyncio daemon on the test's own loop ------------------------------------------


@final
class Daemon:
    """A queue, an executor and a server on the running loop, for one test."""

    def __init__(
        self,
        path: str,
        run: Callable[..., Any],
        *,
        capacity: int = 16,
        **server_options: Any,
    ) -> None:
        self.path = path
        self.queue: Queue[Any] = Queue(capacity)
        self.stop = asyncio.Event()
        self.server: Server[Any] = Server(self.queue, **server_options)
        self.executor = asyncio.create_task(execute(self.queue, run, stop=self.stop))
        self.serving = asyncio.create_task(self.server.serve(listen(path)))

    async def shutdown(self) -> None:
        """The documented order: close the server, close the queue, drain, wait."""
        self.server.close()
        self.queue.close()
        try:
            await asyncio.wait_for(self.executor, DEADLINE)
        finally:
            await asyncio.wait_for(self.serving, DEADLINE)
            await asyncio.wait_for(self.server.wait(), DEADLINE)


@contextlib.asynccontextmanager
async def daemon(run: Callable[..., Any] | None = None, **options: Any) -> AsyncIterator[Daemon]:
    """Run a `Daemon` in a fresh socket directory; shut it down on exit."""
    with socket_dir() as tmp:
        d = Daemon(str(Path(tmp) / "d.sock"), run or ok_run, **options)
        try:
            yield d
        finally:
            await d.shutdown()


async def ok_run(stop: asyncio.Event, trigger: str, payload: object) -> Outcome:
    """A no-op coroutine run that succeeds."""
    return Outcome(True)


@final
class Gate:
    """A run that blocks until released, reporting each start: orders tests without sleeps."""

    def __init__(self) -> None:
        self.started: asyncio.Queue[object] = asyncio.Queue()
        self.release = asyncio.Event()
        self.payloads: list[object] = []

    async def __call__(self, stop: asyncio.Event, trigger: str, payload: object) -> Outcome:
        self.payloads.append(payload)
        await self.started.put(payload)
        await self.release.wait()
        return Outcome(True, "released", 0.0015)


# --- raw clients -------------------------------------------------------------------------


async def exchange(path: str, request: bytes, *, half_close: bool = False) -> list[bytes]:
    """Send raw *request* bytes and return every line the server sends until it closes."""
    reader, writer = await asyncio.open_unix_connection(path)
    try:
        writer.write(request)
        await writer.drain()
        if half_close:
            writer.write_eof()
        lines = []
        while line := await asyncio.wait_for(reader.readline(), DEADLINE):
            lines.append(line)
        return lines
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def read_line(reader: asyncio.StreamReader) -> bytes:
    """One line from the server, within the deadline."""
    return await asyncio.wait_for(reader.readline(), DEADLINE)


def run_async(coro: Awaitable[Any], loop: str = "asyncio") -> Any:
    """``asyncio.run`` with debug on, as every asyncio test runs; ``loop="uvloop"`` runs
    it on uvloop instead."""

    async def main() -> Any:
        return await coro

    factory = None
    if loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(debug=True, loop_factory=factory) as runner:
        return runner.run(main())


#: The event loops the daemon-side tests that care run on.
LOOPS = ("asyncio", "uvloop")


def blocking_connect(path: str) -> socket.socket:
    """A plain blocking client socket connected to *path*."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(DEADLINE)
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Start *fn* on a thread; the list gets its result or exception."""
    box: list[Any] = []

    def target() -> None:
        try:
            box.append(fn())
        except BaseException as exc:
            box.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


# --- an independent model of Go's encoding/json string escaping --------------------------


def go_string_model(value: str) -> str:
    """Quote *value* the way Go 1.27+'s encoder writes a string, character by character.

    Written from Go's ``appendString``, independently of the library: a lone
    surrogate (an undecodable byte) becomes a raw U+FFFD, as Go 1.27 writes
    each invalid UTF-8 byte.
    """
    short = {
        '"': '\\"',
        "\\": "\\\\",
        "\b": "\\b",
        "\f": "\\f",
        "\n": "\\n",
        "\r": "\\r",
        "\t": "\\t",
    }
    out = ['"']
    for ch in value:
        code = ord(ch)
        if ch in short:
            out.append(short[ch])
        elif code < 0x20 or ch in "<>&":
            out.append(f"\\u00{code:02x}")
        elif code in (0x2028, 0x2029):
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\ufffd")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def go_event_model(kind: str, reason: str, duration_ms: int, ok: bool) -> bytes:
    """The Go library's Event line, from the struct tags ``event``,
    ``reason,omitempty``, ``duration_ms,omitempty``, ``ok``."""
    fields = [f'"event":{go_string_model(kind)}']
    if reason:
        fields.append(f'"reason":{go_string_model(reason)}')
    if duration_ms:
        fields.append(f'"duration_ms":{duration_ms}')
    fields.append(f'"ok":{"true" if ok else "false"}')
    return ("{" + ",".join(fields) + "}\n").encode("utf-8")


# --- Hypothesis strategies ------------------------------------------------------------------

#: Text with everything Go escapes specially, lone surrogates included.
wire_text = st.text(
    st.one_of(
        st.characters(codec=None),
        st.sampled_from('<>&"\\\b\f\n\r\t\x00\x1f\x7f\u2028\u2029\ufffd\ud800\udfff\udc80'),
    )
)

#: Any JSON value Python's json module round-trips exactly.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(codec="utf-8")),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=8), children, max_size=5)
    ),
    max_leaves=20,
)


@final
class RawServer:
    """A hand-driven server on a thread: reads one request line, sends *script*, then
    either hangs up or waits for the client to leave (recording that it did)."""

    def __init__(self, path: str, script: list[bytes], *, hang_up: bool = True) -> None:
        self.path = path
        self.script = script
        self.hang_up = hang_up
        self.request = b""
        self.client_left = threading.Event()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.listener.settimeout(DEADLINE)
        conn, _ = self.listener.accept()
        with conn:
            conn.settimeout(DEADLINE)
            while not self.request.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                self.request += chunk
            with contextlib.suppress(OSError):  # the client may leave mid-script
                for line in self.script:
                    conn.sendall(line)
            if not self.hang_up:
                with contextlib.suppress(OSError):
                    while conn.recv(65536):
                        pass
                self.client_left.set()

    def close(self) -> None:
        """Join the thread and close the listener."""
        self.thread.join(DEADLINE)
        self.listener.close()


# --- a socket that belongs to another user --------------------------------------------

FOREIGN_SERVER = """
import os, socket, sys
path, uid, gid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.setgroups([])
os.setgid(gid)
os.setuid(uid)  # from here on, another user: the socket and its listener are theirs
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(path)
listener.listen(1)
print("ready", flush=True)
listener.settimeout(30)
conn, _ = listener.accept()
conn.settimeout(30)
got = b""
while not got.endswith(b"\\n"):
    chunk = conn.recv(65536)
    if not chunk:
        break
    got += chunk
if got:
    conn.sendall(b'{"event":"done","reason":"served by another user","ok":true}\\n')
print("received", got.hex(), flush=True)
"""


@contextlib.contextmanager
def foreign_server(directory: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A listener on a socket created by ``nobody`` (a child that drops root with setuid):
    it reports on stdout whatever request bytes reached it."""
    if os.geteuid() != 0:
        pytest.skip("creating a socket as another user needs root")
    nobody = pwd.getpwnam("nobody")
    home = Path(directory) / "shared"
    home.mkdir()
    os.chown(home, nobody.pw_uid, nobody.pw_gid)
    Path(directory).chmod(0o711)  # nobody may reach its own folder inside the test's
    path = str(home / "d.sock")
    child = subprocess.Popen(
        [sys.executable, "-u", "-c", FOREIGN_SERVER, path, str(nobody.pw_uid), str(nobody.pw_gid)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert "ready\n" == child.stdout.readline()
        assert nobody.pw_uid == Path(path).stat().st_uid
        yield path, child
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=DEADLINE)


def received(child: subprocess.Popen[str]) -> bytes:
    """The request bytes the foreign listener got (after its client left)."""
    out, _ = child.communicate(timeout=DEADLINE)
    return bytes.fromhex(out.split("received", 1)[1].strip())
