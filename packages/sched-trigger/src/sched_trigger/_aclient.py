"""The asyncio twin of `submit`: `asubmit`."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Callable

from ._client import _DIAL_SECONDS, LINE_LIMIT, _timeout_seconds, _unreachable, path_too_long
from ._durations import Duration
from ._errors import ConnectionLost, SendFailed, SubmitTimeout, Unreachable
from ._wire import EVENT_DONE, EVENT_QUEUED, EVENT_STARTED, Event, encode_payload

__all__ = ["asubmit"]

_RELAYED = (EVENT_QUEUED, EVENT_STARTED)


async def asubmit(
    socket_path: str | os.PathLike[str],
    payload: object,
    on_event: Callable[[Event], object] | None = None,
    *,
    timeout: Duration | None = None,
) -> Event:
    """Submit one run and wait for its result, on an event loop: the twin of `submit`.

    Same arguments, result and errors as `submit`. Cancelling the task closes
    the connection (the daemon sees the client leave) and propagates.

    Args:
        socket_path: the daemon's unix socket.
        payload: a dataclass instance, or anything ``json`` serializes.
        on_event: called with each ``queued`` and ``started`` event; an
            exception it raises closes the connection and propagates.
        timeout: bound on the whole exchange; ``None`` waits as long as the
            run takes. The connect is bounded by `DIAL_TIMEOUT` either way.

    Returns:
        The ``done`` event (``ok`` false with the queue's message when rejected).

    Raises:
        Unreachable: the socket could not be connected to.
        SendFailed: the request could not be sent.
        ConnectionLost: the connection ended, or carried garbage, before ``done``.
        SubmitTimeout: *timeout* elapsed first.
        TypeError: the payload is not serializable.
        ValueError: the payload holds NaN or an infinity, or *timeout* is invalid.
    """
    data = encode_payload(payload)
    seconds = _timeout_seconds(timeout)
    path = os.fspath(socket_path)
    try:
        async with asyncio.timeout(seconds):
            return await _exchange(path, data, on_event)
    except TimeoutError as exc:
        if isinstance(exc, SubmitTimeout):
            raise
        raise SubmitTimeout(f"timed out waiting for the run's result from {path}") from None


async def _exchange(path: str, data: bytes, on_event: Callable[[Event], object] | None) -> Event:
    reader, writer = await _connect(path)
    try:
        try:
            writer.write(data)
            await writer.drain()
        except OSError as exc:
            raise SendFailed(exc.errno, exc.strerror or "cannot send", path) from exc
        while True:
            try:
                line = await reader.readline()
            except (OSError, ValueError) as exc:
                raise ConnectionLost(errno.ECONNRESET, f"connection lost: {exc}", path) from exc
            if not line.endswith(b"\n"):
                raise ConnectionLost(
                    errno.ECONNRESET, "connection closed before the run's result", path
                )
            if not line.strip():
                continue
            try:
                event = Event.decode(line)
            except ValueError as exc:
                raise ConnectionLost(errno.EPROTO, str(exc), path) from None
            if event.kind == EVENT_DONE:
                return event
            if on_event is not None and event.kind in _RELAYED:
                on_event(event)
    finally:
        writer.close()


async def _connect(path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    problem = path_too_long(path)
    if problem is not None:
        raise Unreachable(errno.ENAMETOOLONG, problem, path)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _DIAL_SECONDS
    delay = 0.001
    while True:
        try:
            async with asyncio.timeout_at(deadline):
                return await asyncio.open_unix_connection(path, limit=LINE_LIMIT)
        except TimeoutError:
            raise Unreachable(errno.ETIMEDOUT, "timed out connecting", path) from None
        except OSError as exc:
            # A full accept backlog refuses a non-blocking connect with EAGAIN: retry.
            if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK) and loop.time() < deadline:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.05)
                continue
            raise _unreachable(exc, path) from exc
