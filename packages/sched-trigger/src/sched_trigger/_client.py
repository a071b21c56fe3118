"""The synchronous client a trigger subcommand wraps: `submit`.

This module is the client's whole import path, together with ``_wire`` and
``_errors``: it loads ``socket``, ``json`` and ``datetime`` and nothing heavier
(no asyncio, no dataclasses, no typing), because a trigger subcommand that is
``docker exec``'d every minute pays every import on every run.
"""

from __future__ import annotations

import errno
import socket
import sys
import time

from ._errors import ConnectionLost, SendFailed, SubmitTimeout, TriggerError, Unreachable
from ._wire import EVENT_DONE, EVENT_QUEUED, EVENT_STARTED, Event, encode_payload

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import timedelta
    from os import PathLike

    from ._durations import Duration

    #: How long `submit` and `asubmit` wait to connect (5 seconds), including a
    #: wait for room in a full accept backlog.
    DIAL_TIMEOUT: timedelta

__all__ = ["DIAL_TIMEOUT", "submit"]  # DIAL_TIMEOUT comes from __getattr__

# How long `submit` waits to connect, including a wait for room in a full accept
# backlog. Exported as the timedelta DIAL_TIMEOUT, built on first access so that
# the client path does not import datetime.
_DIAL_SECONDS = 5.0


def __getattr__(name: str) -> timedelta:
    if name == "DIAL_TIMEOUT":
        from datetime import timedelta

        return timedelta(seconds=_DIAL_SECONDS)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_RELAYED = (EVENT_QUEUED, EVENT_STARTED)
#: The longest event line the clients accept: a daemon never sends one this long.
LINE_LIMIT = 1024 * 1024
# Connect failures that mean "nobody can take the request": no file, a stale
# socket, a refused permission, a path that is not a socket.
_RETRY_CONNECT = (errno.EAGAIN, errno.EWOULDBLOCK)


def _timeout_seconds(timeout: Duration | None) -> float | None:
    if timeout is None:
        return None
    # Only a caller that passes a timeout pays for the coercion module's imports.
    from ._durations import to_seconds

    return max(to_seconds(timeout, name="timeout"), 0.0)


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    return deadline - time.monotonic()


def connect(path: str, deadline: float | None) -> socket.socket:
    """Connect to the daemon within `DIAL_TIMEOUT` (and *deadline*), or raise.

    The first attempt does not block. If the kernel refuses it with ``EAGAIN``
    (the daemon's accept backlog is full), Linux lets a blocking connect wait
    in the kernel until there is room, bounded by ``SO_SNDTIMEO``: no polling.
    Elsewhere the connect is retried with short, growing pauses. Either way
    the wait ends at the bound.

    Raises:
        Unreachable: the connect failed or did not finish in time.
        SubmitTimeout: *deadline* passed first.
    """
    dial_deadline = time.monotonic() + _DIAL_SECONDS
    limit = dial_deadline if deadline is None else min(dial_deadline, deadline)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        kernel_wait = False
        delay = 0.001
        while True:
            budget = limit - time.monotonic()
            if budget <= 0:
                if deadline is not None and deadline <= dial_deadline:
                    raise SubmitTimeout(f"timed out connecting to {path}")
                raise Unreachable(errno.ETIMEDOUT, "timed out connecting", path)
            if kernel_wait:
                _send_timeout(sock, budget)
            else:
                sock.settimeout(budget)
            try:
                sock.connect(path)
            except TimeoutError:
                continue
            except OSError as exc:
                if exc.errno not in _RETRY_CONNECT:
                    raise Unreachable(exc.errno, exc.strerror or "cannot connect", path) from exc
                if _KERNEL_WAIT and not kernel_wait:
                    kernel_wait = True
                    sock.settimeout(None)
                elif not _KERNEL_WAIT:
                    time.sleep(min(delay, budget))
                    delay = min(delay * 2, 0.05)
                continue
            if kernel_wait:
                _send_timeout(sock, 0)
            return sock
    except BaseException:
        sock.close()
        raise


# Linux's blocking unix-socket connect sleeps until the backlog has room, for
# at most SO_SNDTIMEO.
_KERNEL_WAIT = sys.platform == "linux"


def _send_timeout(sock: socket.socket, seconds: float) -> None:
    import struct  # only on the rare full-backlog path

    whole = int(seconds)
    micros = int((seconds - whole) * 1_000_000) if seconds > 0 else 0
    if seconds > 0 and not whole and not micros:
        micros = 1  # zero would mean "wait for ever"
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("@ll", whole, micros))


def submit(
    socket_path: str | PathLike[str],
    payload: object,
    on_event: Callable[[Event], object] | None = None,
    *,
    timeout: Duration | None = None,
) -> Event:
    """Submit one run to the daemon on *socket_path* and wait for its own result.

    The payload is sent as one compact JSON line; the call then blocks for the
    whole queue wait and run, relaying ``queued`` and ``started`` to *on_event*
    and returning the final ``done`` event. Event kinds it does not know are
    ignored. Whatever ends the wait early (a timeout, Ctrl-C, an exception in
    *on_event*) closes the connection, so the daemon sees the client leave.

    Args:
        socket_path: the daemon's unix socket.
        payload: a dataclass instance, or anything ``json`` serializes; ``{}``
            for an argless daemon.
        on_event: called with each ``queued`` and ``started`` event; an
            exception it raises closes the connection and propagates.
        timeout: bound on the whole exchange (a ``timedelta`` or seconds);
            ``None`` waits as long as the run takes. The connect is bounded by
            `DIAL_TIMEOUT` (5 s) either way.

    Returns:
        The ``done`` event: ``ok`` false with the queue's message as ``reason``
        when the daemon rejected the request.

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
    deadline = None if seconds is None else time.monotonic() + seconds
    path = str(socket_path) if not isinstance(socket_path, str) else socket_path
    sock = connect(path, deadline)
    try:
        remaining = _remaining(deadline)
        try:
            if remaining is not None and remaining <= 0:
                raise TimeoutError  # spent by the connect (settimeout refuses a negative)
            sock.settimeout(remaining)
            sock.sendall(data)
        except TimeoutError:
            raise SubmitTimeout(f"timed out sending the request to {path}") from None
        except OSError as exc:
            # The daemon may have answered and hung up mid-send (an oversized
            # request): its answer is the better report.
            try:
                return _read_events(sock, path, deadline, on_event)
            except TriggerError:
                pass
            raise SendFailed(exc.errno, exc.strerror or "cannot send", path) from exc
        return _read_events(sock, path, deadline, on_event)
    finally:
        sock.close()


def _read_events(
    sock: socket.socket,
    path: str,
    deadline: float | None,
    on_event: Callable[[Event], object] | None,
) -> Event:
    buffer = b""
    while True:
        newline = buffer.find(b"\n")
        if newline < 0:
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise SubmitTimeout(f"timed out waiting for the run's result from {path}")
                sock.settimeout(remaining)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                raise SubmitTimeout(f"timed out waiting for the run's result from {path}") from None
            except OSError as exc:
                raise ConnectionLost(exc.errno, exc.strerror or "connection lost", path) from exc
            if not chunk:
                raise ConnectionLost(
                    errno.ECONNRESET, "connection closed before the run's result", path
                )
            buffer += chunk
            if len(buffer) > LINE_LIMIT:
                raise ConnectionLost(errno.EPROTO, "daemon sent an event line over 1 MiB", path)
            continue
        line, buffer = buffer[:newline], buffer[newline + 1 :]
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
