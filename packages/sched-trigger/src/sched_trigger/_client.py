"""The synchronous client a trigger subcommand wraps: `submit`.

This module is the client's whole import path, together with ``_wire`` and
``_errors``: it loads ``socket``, ``json`` and ``datetime`` and nothing heavier
(no asyncio, no dataclasses, no typing), because a trigger subcommand that is
``docker exec``'d every minute pays every import on every run.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import sys
import time

from ._errors import (
    NOT_A_SOCKET,
    ConnectionLost,
    SendFailed,
    SubmitCancelled,
    SubmitTimeout,
    TriggerError,
    Unreachable,
    final,
)
from ._wire import (
    EVENT_DONE,
    EVENT_QUEUED,
    EVENT_STARTED,
    MAX_EVENT_LINE,
    Event,
    encode_payload,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import timedelta
    from os import PathLike
    from threading import Event as ThreadingEvent

    from ._durations import Duration

    #: How long `submit` and `asubmit` wait to connect (5 seconds), including a
    #: wait for room in a full accept backlog.
    DIAL_TIMEOUT: timedelta

__all__ = [  # DIAL_TIMEOUT comes from __getattr__
    "DIAL_TIMEOUT",
    "LINE_LIMIT",
    "MAX_PATH_BYTES",
    "EventLines",
    "check_owner",
    "new_socket",
    "path_too_long",
    "submit",
]

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
#: The longest event line the clients accept, its newline included (64 KiB): the
#: server's cap on what it sends (it cuts a longer run reason to fit, and says so),
#: and the longest line Go's ``bufio.Scanner`` reads by default.
LINE_LIMIT = MAX_EVENT_LINE
# The one connect failure worth retrying: a full accept backlog. Every other
# (no file, a stale socket, a refused permission, not a socket) is final.
_RETRY_CONNECT = (errno.EAGAIN, errno.EWOULDBLOCK)


#: The longest socket path the system takes, in bytes (``sun_path`` holds a NUL too).
MAX_PATH_BYTES = 107 if sys.platform.startswith("linux") else 103


def path_too_long(path: str) -> str | None:
    """What is wrong with *path* if it is longer than a unix socket takes, else None."""
    size = len(os.fsencode(path))
    if size <= MAX_PATH_BYTES:
        return None
    return f"socket path is {size} bytes, over the {MAX_PATH_BYTES}-byte limit of a unix socket"


def _timeout_seconds(timeout: Duration | None) -> float | None:
    if timeout is None:
        return None
    finite = isinstance(timeout, int | float) and timeout - timeout == 0
    if finite and not isinstance(timeout, bool):  # the common case: no import
        return max(float(timeout), 0.0)  # type: ignore[arg-type]
    # Only a caller that passes a timedelta (or garbage) pays for the coercion module.
    from ._durations import to_seconds

    return max(to_seconds(timeout, name="timeout"), 0.0)


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    return deadline - time.monotonic()


def connect(path: str, deadline: float | None, stop: ThreadingEvent | None = None) -> socket.socket:
    """Connect to the daemon within `DIAL_TIMEOUT` (and *deadline*), or raise.

    The first attempt does not block. If the kernel refuses it with ``EAGAIN``
    (the daemon's accept backlog is full), Linux lets a blocking connect wait
    in the kernel until there is room, bounded by ``SO_SNDTIMEO``: no polling.
    Elsewhere, or with a *stop* event to listen to, the connect is retried
    with short, growing pauses. Either way the wait ends at the bound.

    Raises:
        Unreachable: the connect failed or did not finish in time; the path
            is too long, or is not a socket.
        SubmitTimeout: *deadline* passed first.
        SubmitCancelled: *stop* was set first.
    """
    problem = path_too_long(path)
    if problem is not None:
        raise Unreachable(errno.ENAMETOOLONG, problem, path)
    kernel_waits = _KERNEL_WAIT and stop is None
    dial_deadline = time.monotonic() + _DIAL_SECONDS
    limit = dial_deadline if deadline is None else min(dial_deadline, deadline)
    sock = new_socket(path)
    try:
        kernel_wait = False
        delay = 0.001
        while True:
            budget = limit - time.monotonic()
            if budget <= 0:
                if deadline is not None and deadline <= dial_deadline:
                    raise SubmitTimeout(f"timed out connecting to {path}")
                raise Unreachable(errno.ETIMEDOUT, "timed out connecting", path)
            try:
                if kernel_wait:
                    _send_timeout(sock, budget)
                else:
                    sock.settimeout(budget)
            except OSError as exc:
                raise _unreachable(exc, path) from exc
            try:
                sock.connect(path)
            except TimeoutError:
                continue
            except OSError as exc:
                if exc.errno not in _RETRY_CONNECT:
                    raise _unreachable(exc, path) from exc
                if kernel_waits and not kernel_wait:
                    kernel_wait = True
                    sock.settimeout(None)
                elif not kernel_waits:
                    pause = min(delay, budget)
                    if stop is not None and stop.wait(pause):
                        raise SubmitCancelled(f"stopped while connecting to {path}") from None
                    if stop is None:
                        time.sleep(pause)
                    delay = min(delay * 2, 0.05)
                continue
            if not _connected(sock):
                # A signal interrupted a connect waiting in the kernel, and
                # Python (PEP 475) then waited for the socket to be writable,
                # which an unconnected unix socket is at once: try again.
                continue
            if kernel_wait:
                _send_timeout(sock, 0)
            return sock
    except BaseException:
        sock.close()
        raise


def new_socket(path: str) -> socket.socket:
    """A unix stream socket for the connect; a process out of descriptors is `Unreachable`."""
    try:
        return socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError as exc:
        raise _unreachable(exc, path) from exc


def _connected(sock: socket.socket) -> bool:
    try:
        sock.getpeername()
    except OSError:
        return False
    return True


def _unreachable(exc: OSError, path: str) -> Unreachable:
    """The connect failure, named plainly when the path is not a socket at all."""
    if exc.errno in (errno.ECONNREFUSED, errno.ENOTSOCK):
        try:
            mode = os.stat(path).st_mode  # noqa: PTH116 - pathlib is not on the client path
        except OSError:
            mode = 0
        if mode and not stat.S_ISSOCK(mode):
            return Unreachable(errno.ENOTSOCK, NOT_A_SOCKET, path)
    return Unreachable(exc.errno, exc.strerror or "cannot connect", path)


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


def peer_uid(sock: socket.socket, path: str) -> int:
    """The uid of the process serving the connected *sock*: the daemon's user.

    On Linux the kernel's record of who listens (``SO_PEERCRED``, taken when
    the daemon called ``listen``); elsewhere the owner of the socket file.
    """
    if _PEERCRED is not None:
        cred = sock.getsockopt(socket.SOL_SOCKET, _PEERCRED, 12)  # struct ucred: pid, uid, gid
        return int.from_bytes(cred[4:8], sys.byteorder)
    return os.stat(path).st_uid  # noqa: PTH116 - pathlib is not on the client path


_PEERCRED: int | None = getattr(socket, "SO_PEERCRED", None)


def check_owner(sock: socket.socket, path: str, owner: int | None) -> None:
    """Refuse a daemon that runs as a user the caller did not choose to trust.

    Trusted: the caller's own user, root, and *owner* (the daemon's uid, for a
    deliberate cross-user set-up). Anyone else may have planted the socket to
    collect what trigger subcommands send.

    Raises:
        Unreachable: ``EPERM``, naming the uid that serves the socket.
    """
    try:
        uid = peer_uid(sock, path)
    except OSError as exc:
        raise _unreachable(exc, path) from exc
    me = os.geteuid()
    if uid in (me, 0, owner):
        return
    raise Unreachable(
        errno.EPERM, f"the daemon runs as uid {uid}, not as you (uid {me}) or root", path
    )


def submit(
    socket_path: str | PathLike[str],
    payload: object,
    on_event: Callable[[Event], object] | None = None,
    *,
    timeout: Duration | None = None,
    stop: ThreadingEvent | None = None,
    owner: int | None = None,
) -> Event:
    """Submit one run to the daemon on *socket_path* and wait for its own result.

    The payload is sent as one compact JSON line; the call then blocks for the
    whole queue wait and run, relaying ``queued`` and ``started`` to *on_event*
    and returning the final ``done`` event. Event kinds it does not know are
    ignored. Whatever ends the wait early (a timeout, the *stop* event,
    Ctrl-C, an exception in *on_event*) closes the connection, so the daemon
    sees the client leave; a run it accepted still happens.

    Args:
        socket_path: the daemon's unix socket.
        payload: a dataclass instance, or anything ``json`` serializes; ``{}``
            for an argless daemon.
        on_event: called with each ``queued`` and ``started`` event; an
            exception it raises closes the connection and propagates.
        timeout: bound on the whole exchange (a ``timedelta`` or seconds);
            ``None`` waits as long as the run takes. The connect is bounded by
            `DIAL_TIMEOUT` (5 s) either way.
        stop: a ``threading.Event`` that ends the wait as soon as it is set
            (Go binds ``Submit`` to a signal context for this), without
            polling: a helper thread waits on it.
        owner: the uid the daemon runs as, when that is another user (a
            deliberate cross-user set-up). Before anything is sent, the
            process serving the socket must run as the caller's own user, as
            root, or as *owner*: a socket another user planted at the path
            gets nothing.

    Returns:
        The ``done`` event: ``ok`` false with the queue's message as ``reason``
        when the daemon rejected the request.

    Raises:
        Unreachable: the socket could not be connected to, or is served by a
            user not trusted (``EPERM``; nothing was sent).
        SendFailed: the request could not be sent, and the daemon gave no answer.
        ConnectionLost: the connection ended, or carried garbage, before ``done``.
        SubmitTimeout: *timeout* elapsed first.
        SubmitCancelled: *stop* was set first.
        TypeError: the payload is not serializable.
        ValueError: the payload holds NaN or an infinity, nests too deeply to
            encode, or *timeout* is invalid.
    """
    data = encode_payload(payload)
    seconds = _timeout_seconds(timeout)
    deadline = None if seconds is None else time.monotonic() + seconds
    path = str(socket_path) if not isinstance(socket_path, str) else socket_path
    if stop is not None and stop.is_set():
        raise SubmitCancelled(f"stopped before connecting to {path}")
    sock = connect(path, deadline, stop)
    unsubscribe = None
    try:
        check_owner(sock, path, owner)
        if stop is not None:
            from ._stopwatch import subscribe

            unsubscribe = subscribe(stop, lambda: _shut(sock))
        return _exchange(sock, path, data, deadline, on_event)
    except (TriggerError, OSError):
        if stop is not None and stop.is_set():
            raise SubmitCancelled(f"stopped waiting for the result from {path}") from None
        raise
    finally:
        if unsubscribe is not None:
            unsubscribe()  # before the close: the helper never touches a closed socket
        sock.close()


def _shut(sock: socket.socket) -> None:
    """Wake a thread blocked on *sock* (from the stop helper): it then sees the stop."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        return  # not connected any more: the waiter is waking anyway


def _exchange(
    sock: socket.socket,
    path: str,
    data: bytes,
    deadline: float | None,
    on_event: Callable[[Event], object] | None,
) -> Event:
    """Send the request on the connected *sock* and read the events until ``done``."""
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


def _read_events(
    sock: socket.socket,
    path: str,
    deadline: float | None,
    on_event: Callable[[Event], object] | None,
) -> Event:
    lines = EventLines(path, on_event)
    while True:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SubmitTimeout(f"timed out waiting for the run's result from {path}")
            sock.settimeout(remaining)
        try:
            chunk = sock.recv(_CHUNK)
        except TimeoutError:
            raise SubmitTimeout(f"timed out waiting for the run's result from {path}") from None
        except OSError as exc:
            raise ConnectionLost(exc.errno, exc.strerror or "connection lost", path) from exc
        final = lines.feed(chunk)
        if final is not None:
            return final


_CHUNK = 65536


@final
class EventLines:
    """The daemon's side of one connection, as both clients read it: bytes in, events out.

    `feed` takes each chunk as it arrives (an empty one at end of file),
    relays ``queued`` and ``started`` to *on_event*, and returns the ``done``
    event once it is complete. No I/O here: `submit` and `asubmit` read with
    their own calls and agree on everything else, errors included.
    """

    __slots__ = ("_buffer", "_on_event", "_path", "_scanned")

    def __init__(self, path: str, on_event: Callable[[Event], object] | None) -> None:
        self._path = path
        self._on_event = on_event
        self._buffer = bytearray()
        self._scanned = 0  # how much of the buffer holds no newline

    def feed(self, chunk: bytes) -> Event | None:
        """Take the next *chunk*; return ``done`` once it arrived, else None.

        Raises:
            ConnectionLost: the connection ended (an empty *chunk*) before
                ``done``, a line is not an event, or a line runs past
                `LINE_LIMIT` bytes (``EPROTO``).
        """
        if not chunk:
            raise ConnectionLost(
                errno.ECONNRESET, "connection closed before the run's result", self._path
            )
        buffer = self._buffer
        buffer += chunk
        start = 0
        newline = buffer.find(b"\n", self._scanned)
        while newline >= 0:
            if newline - start >= LINE_LIMIT:  # the newline makes it one byte too long
                raise self._too_long()
            line = bytes(buffer[start:newline])
            start = newline + 1
            if line.strip():
                try:
                    event = Event.decode(line)
                except ValueError as exc:
                    raise ConnectionLost(errno.EPROTO, str(exc), self._path) from None
                if event.kind == EVENT_DONE:
                    return event
                if self._on_event is not None and event.kind in _RELAYED:
                    self._on_event(event)
            newline = buffer.find(b"\n", start)
        del buffer[:start]
        self._scanned = len(buffer)
        if len(buffer) >= LINE_LIMIT:  # no room left for the newline
            raise self._too_long()
        return None

    def _too_long(self) -> ConnectionLost:
        return ConnectionLost(
            errno.EPROTO,
            f"daemon sent an event line over {LINE_LIMIT:,} bytes, longer than any daemon writes",
            self._path,
        )
