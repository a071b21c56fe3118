"""The asyncio twin of `submit`: `asubmit`.

The same exchange as `submit`, on the event loop's own socket calls: the
connect, the owner check, the event-line reader (`EventLines`) and every
error are `submit`'s, so the twins agree, down to the daemon's answer to a
request it refused while it was still being sent.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from collections.abc import Callable

from ._client import (
    _CHUNK,
    _DIAL_SECONDS,
    EventLines,
    _timeout_seconds,
    _unreachable,
    check_owner,
    new_socket,
    path_too_long,
)
from ._durations import Duration
from ._errors import ConnectionLost, SendFailed, SubmitTimeout, TriggerError, Unreachable
from ._wire import Event, encode_payload

__all__ = ["asubmit"]


async def asubmit(
    socket_path: str | os.PathLike[str],
    payload: object,
    on_event: Callable[[Event], object] | None = None,
    *,
    timeout: Duration | None = None,
    owner: int | None = None,
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
        owner: the daemon's uid in a deliberate cross-user set-up; without
            it, only a daemon running as the caller's user or root is sent
            anything (see `submit`).

    Returns:
        The ``done`` event (``ok`` false with the queue's message when rejected).

    Raises:
        Unreachable: the socket could not be connected to, or is served by a
            user not trusted (``EPERM``; nothing was sent).
        SendFailed: the request could not be sent, and the daemon gave no answer.
        ConnectionLost: the connection ended, or carried garbage, before ``done``.
        SubmitTimeout: *timeout* elapsed first.
        TypeError: the payload is not serializable.
        ValueError: the payload holds NaN or an infinity, nests too deeply to
            encode, or *timeout* is invalid.
    """
    data = encode_payload(payload)
    seconds = _timeout_seconds(timeout)
    path = os.fspath(socket_path)
    try:
        async with asyncio.timeout(seconds):
            return await _exchange(path, data, on_event, owner)
    except TimeoutError as exc:
        if isinstance(exc, SubmitTimeout):
            raise
        raise SubmitTimeout(f"timed out waiting for the run's result from {path}") from None


async def _exchange(
    path: str, data: bytes, on_event: Callable[[Event], object] | None, owner: int | None
) -> Event:
    loop = asyncio.get_running_loop()
    sock = await _connect(loop, path)
    try:
        check_owner(sock, path, owner)
        try:
            await loop.sock_sendall(sock, data)
        except OSError as exc:
            # The daemon may have answered and hung up mid-send (an oversized
            # request): its answer is the better report, as in submit.
            try:
                return await _read_events(loop, sock, path, on_event)
            except TriggerError:
                pass
            raise SendFailed(exc.errno, exc.strerror or "cannot send", path) from exc
        return await _read_events(loop, sock, path, on_event)
    finally:
        sock.close()


async def _read_events(
    loop: asyncio.AbstractEventLoop,
    sock: socket.socket,
    path: str,
    on_event: Callable[[Event], object] | None,
) -> Event:
    lines = EventLines(path, on_event)
    while True:
        try:
            chunk = await loop.sock_recv(sock, _CHUNK)
        except OSError as exc:
            raise ConnectionLost(exc.errno, exc.strerror or "connection lost", path) from exc
        final = lines.feed(chunk)
        if final is not None:
            return final


async def _connect(loop: asyncio.AbstractEventLoop, path: str) -> socket.socket:
    """Connect within `DIAL_TIMEOUT`, retrying while the accept backlog is full.

    A unix-socket connect finishes or fails at once, except that a full
    backlog refuses it with ``EAGAIN``; so the connect is made here, not with
    ``loop.sock_connect``, which takes ``EAGAIN`` for a connect in progress.
    """
    problem = path_too_long(path)
    if problem is not None:
        raise Unreachable(errno.ENAMETOOLONG, problem, path)
    deadline = loop.time() + _DIAL_SECONDS
    delay = 0.001
    sock = new_socket(path)
    try:
        sock.setblocking(False)
        while True:
            try:
                sock.connect(path)
            except (BlockingIOError, InterruptedError) as exc:
                if loop.time() >= deadline:
                    raise Unreachable(errno.ETIMEDOUT, "timed out connecting", path) from exc
                await asyncio.sleep(min(delay, max(deadline - loop.time(), 0)))
                delay = min(delay * 2, 0.05)
                continue
            except OSError as exc:
                raise _unreachable(exc, path) from exc
            return sock
    except BaseException:
        sock.close()
        raise
