"""The floor for sched-trigger's round trips: the least a Python server can do per request.

A minimal ``asyncio.Protocol`` server that reads one request line, decodes it
with ``json.loads``, and writes the three event lines of a no-op run (the
same bytes sched-trigger writes) in one write, then closes. No queue, no job,
no executor, no bounds: what the exchange costs on this loop, and nothing
else. ``bench_sched_trigger.py`` measures sched-trigger against it on the same
loop, asyncio's or uvloop's, in the same run.

Usage: ``python bench/_trigger_floor.py asyncio|uvloop PATH`` (prints ``ready``).
"""

from __future__ import annotations

import asyncio
import json
import sys

#: queued, started, done: the lines sched-trigger sends for an ok no-op run.
REPLY = (
    b'{"event":"queued","ok":false}\n{"event":"started","ok":false}\n{"event":"done","ok":true}\n'
)


class Floor(asyncio.Protocol):
    """One request line in, the three event lines out in one write, then close."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if b"\n" in self.buffer:
            json.loads(self.buffer)
            self.transport.write(REPLY)
            self.transport.close()


async def main(path: str) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_unix_server(Floor, path, backlog=4096)
    print("ready", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    loop_name, socket_path = sys.argv[1], sys.argv[2]
    factory = None
    if loop_name == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main(socket_path))
