"""The socket server that feeds the queue and streams each request's events: `Server`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar, final

from ._durations import Duration, to_seconds
from ._errors import CLOSED_MESSAGE, QueueClosed, QueueFull
from ._job import TRIGGER_EXTERNAL, Job
from ._listen import DEFAULT_BACKLOG, unlink_if_ours
from ._queue import Queue
from ._request import RequestReader, Undecodable, dataclass_decoder
from ._wire import EVENT_DONE, EVENT_QUEUED, EVENT_STARTED, encode_event

__all__ = ["UNDECODABLE_REASON", "Server"]

P = TypeVar("P")

#: The ``done`` reason for a request that is not one JSON value within the cap.
UNDECODABLE_REASON = "undecodable request"

_LOGGER = logging.getLogger("sched_trigger")
_QUEUED = encode_event(EVENT_QUEUED, False)
_STARTED = encode_event(EVENT_STARTED, False)
_UNDECODABLE = encode_event(EVENT_DONE, False, UNDECODABLE_REASON)
_CLOSED = encode_event(EVENT_DONE, False, CLOSED_MESSAGE)
_DONE_OK = encode_event(EVENT_DONE, True)
_DONE_FAILED = encode_event(EVENT_DONE, False)

_READING, _WAITING, _FINISHED = 0, 1, 2
#: How many connections one wake-up of the listening socket accepts at most.
_ACCEPT_BATCH = 128
#: How long accepting pauses after it failed (Go's server sleeps one second).
_ACCEPT_PAUSE = 1.0


@final
class Server(Generic[P]):
    """Accept trigger requests on a listening unix socket and stream their events back.

    One request per connection: the server decodes one JSON value as soon as
    it has arrived (no trailing newline needed; reading stops there),
    as Go's ``encoding/json`` decodes it, into *payload_type* (a dataclass:
    fields checked by type, keys matched ignoring case with the last of two
    keys for one field winning, unknown keys ignored, missing keys and
    ``null`` leaving the default), or through *decode*, or leaves it as the
    parsed JSON; it submits a `Job` with trigger `TRIGGER_EXTERNAL` to
    *queue* and answers:

    * accepted: ``queued``, then ``started`` when the run begins, then exactly
      one ``done`` carrying ``ok``, ``duration_ms`` and ``reason``;
    * rejected: ``done`` with ``ok`` false and the queue's message
      (``run queue is full``, ``scheduler is shutting down``);
    * undecodable, oversized or too slow: ``done`` with ``ok`` false and
      ``undecodable request``.

    Without hooks the server logs ``triggered run queued`` (info) and
    ``trigger request rejected: <reason>`` (warning); it never logs a payload.
    Hooks run on the event loop and replace those lines one hook at a time:
    *on_accepted* replaces the accepted line, *on_rejected* the queue-full and
    shutting-down lines. Undecodable requests (there is no payload to hand a
    hook) are logged whatever hooks are set, without the payload.

    Shutdown order: `close` (stop accepting), ``queue.close()``, await the
    executor, then await `wait`.

    Args:
        queue: where accepted requests go.
        payload_type: a dataclass type to decode requests into.
        decode: a callable from the parsed JSON to the payload (an exception
            makes the request undecodable); exclusive with *payload_type*.
        on_accepted: ``on_accepted(payload)`` for each accepted request.
        on_rejected: ``on_rejected(payload, error)`` for each rejected one.
        read_timeout: bound on reading the request (default 30 s).
        write_timeout: bound on each event write (default 10 s).
        max_request_size: the request size cap in bytes (default 8 MiB).
        backlog: the accept backlog.
        logger: where the default lines go (default ``sched_trigger``).

    Raises:
        ValueError: both *payload_type* and *decode*, or a bad bound.
        TypeError: *payload_type* is not a dataclass type.
    """

    def __init__(
        self,
        queue: Queue[P],
        *,
        payload_type: type[P] | None = None,
        decode: Callable[[Any], P] | None = None,
        on_accepted: Callable[[P], object] | None = None,
        on_rejected: Callable[[P, Exception], object] | None = None,
        read_timeout: Duration = 30,
        write_timeout: Duration = 10,
        max_request_size: int = 8 * 1024 * 1024,
        backlog: int = DEFAULT_BACKLOG,
        logger: logging.Logger | None = None,
    ) -> None:
        if payload_type is not None and decode is not None:
            raise ValueError("pass payload_type or decode, not both")
        if payload_type is not None:
            decode = dataclass_decoder(payload_type)
        if max_request_size < 1:
            raise ValueError(f"max_request_size must be positive, got {max_request_size}")
        self.queue = queue
        self._decode = decode
        self._on_accepted = on_accepted
        self._on_rejected = on_rejected
        self._read_timeout = to_seconds(read_timeout, name="read_timeout")
        self._write_timeout = to_seconds(write_timeout, name="write_timeout")
        self._max_request_size = max_request_size
        self._backlog = backlog
        self._logger = logger if logger is not None else _LOGGER
        self._sock: socket.socket | None = None
        self._socket_file: tuple[str, tuple[int, int]] | None = None
        self._accepting = False
        self._accept_timer: asyncio.TimerHandle | None = None
        # Accepted connections whose transport is still being set up.
        self._starting_up: set[asyncio.Task[Any]] = set()
        self._active = 0
        # Connections still reading their request, oldest first, with their deadlines:
        # one timer bounds them all. It is left armed when the server goes idle (it
        # then fires once, finds nothing and stops): cheaper than a timer per request.
        self._reading: dict[_Connection, float] = {}
        # Connections whose job changed on another thread (an executor's worker),
        # advanced together by one wake-up of the loop.
        self._changed: deque[_Connection] = deque()
        self._wake_scheduled = False
        self._read_timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0
        self._closing = False
        self._closed_event: asyncio.Event | None = None
        self._idle_event: asyncio.Event | None = None

    async def serve(self, sock: socket.socket) -> None:
        """Serve *sock* (from `listen`) until `close` is called.

        Returns once the server stops accepting; requests in progress go on
        (see `wait`). If the task running `serve` is cancelled, the server closes.

        When accepting fails (the process is out of file descriptors, say),
        the server logs ``trigger socket accept failed`` and pauses accepting
        for one second, as the Go server does: at most one warning a second,
        and clients wait in the backlog meanwhile instead of being dropped.

        Args:
            sock: the listening unix socket; the server owns it from now on
                (it closes it, and removes its file, on `close`).

        Raises:
            RuntimeError: the server is already serving.
        """
        if self._sock is not None:
            raise RuntimeError("the server is already serving")
        self._sock = sock
        self._events()
        address = sock.getsockname()
        if isinstance(address, str) and address and not address.startswith("\0"):
            try:
                info = os.lstat(address)
            except OSError:
                pass
            else:
                self._socket_file = (address, (info.st_dev, info.st_ino))
        if self._closing:
            self._close_socket()
            return
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        try:
            sock.setblocking(False)
            sock.listen(self._backlog)
            self._start_accepting()
        except BaseException:
            self.close()
            raise
        assert self._closed_event is not None
        try:
            await self._closed_event.wait()
        finally:
            self.close()

    def close(self) -> None:
        """Stop accepting and remove the socket file; returns at once. Idempotent.

        A connection still reading its request is answered ``done`` with
        ``scheduler is shutting down`` and closed at once, so shutdown never
        waits for a silent client. Call it on the server's event loop thread.
        """
        self._closing = True
        self._close_socket()
        self._events()[0].set()
        reading, self._reading = list(self._reading), {}
        for connection in reading:
            connection.cut_short()
        if self._active == 0:
            self._idle()

    async def wait(self) -> None:
        """Wait until the server is closed and every request has its final event on the wire."""
        closed, idle = self._events()
        await closed.wait()
        await idle.wait()

    def _start_accepting(self) -> None:
        self._accept_timer = None
        sock, loop = self._sock, self._loop
        if self._closing or sock is None or loop is None:
            return
        loop.add_reader(sock.fileno(), self._accept)
        self._accepting = True

    def _stop_accepting(self) -> None:
        if self._accept_timer is not None:
            self._accept_timer.cancel()
            self._accept_timer = None
        if self._accepting and self._sock is not None and self._loop is not None:
            self._accepting = False
            self._loop.remove_reader(self._sock.fileno())

    def _accept(self) -> None:
        """Accept what the backlog holds (a bounded batch per wake-up)."""
        sock = self._sock
        assert sock is not None
        for _ in range(_ACCEPT_BATCH):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                if not self._closing:
                    self._accept_failed(exc)
                return
            self._start_connection(conn)

    def _accept_failed(self, error: OSError) -> None:
        """Log once and pause accepting for a second, as the Go server does."""
        self._stop_accepting()
        loop = self._loop
        assert loop is not None
        self._logger.warning(
            "trigger socket accept failed: %s; pausing accepts for 1s",
            error,
            extra={"sched_error": str(error)},
        )
        self._accept_timer = loop.call_later(_ACCEPT_PAUSE, self._start_accepting)

    def _start_connection(self, conn: socket.socket) -> None:
        loop = self._loop
        assert loop is not None
        connection = _Connection(self)
        self._active += 1
        if self._idle_event is not None:
            self._idle_event.clear()
        try:
            task = loop.create_task(loop.connect_accepted_socket(lambda: connection, conn))
        except BaseException:
            conn.close()
            self._released()
            raise
        self._starting_up.add(task)
        task.add_done_callback(lambda done: self._started(done, connection, conn))

    def _started(
        self, task: asyncio.Task[Any], connection: _Connection, conn: socket.socket
    ) -> None:
        self._starting_up.discard(task)
        failed = task.cancelled() or task.exception() is not None
        if failed and not connection.connected:  # never connected: the socket is ours
            conn.close()
            self._released()

    def _events(self) -> tuple[asyncio.Event, asyncio.Event]:
        if self._closed_event is None or self._idle_event is None:
            self._closed_event = asyncio.Event()
            self._idle_event = asyncio.Event()
        return self._closed_event, self._idle_event

    def _changed_elsewhere(self, connection: _Connection) -> None:
        """Called from another thread: advance *connection* on the loop, batched."""
        self._changed.append(connection)
        if self._wake_scheduled:
            return  # a wake-up is on its way: it drains what this added
        self._wake_scheduled = True
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # a closed loop took the connections along
                loop.call_soon_threadsafe(self._advance_changed)

    def _advance_changed(self) -> None:
        self._wake_scheduled = False  # first: a change after this schedules a new wake-up
        changed = self._changed
        while changed:
            changed.popleft().catch_up()

    def _close_socket(self) -> None:
        self._stop_accepting()
        if self._socket_file is not None:
            unlink_if_ours(*self._socket_file)
            self._socket_file = None
        if self._sock is not None:
            self._sock.close()

    def _opened(self, connection: _Connection) -> None:
        if self._closing:
            connection.cut_short()
            return
        loop = self._loop
        assert loop is not None
        deadline = loop.time() + self._read_timeout
        self._reading[connection] = deadline
        if self._read_timer is None:
            self._read_timer = loop.call_at(deadline, self._read_deadlines)

    def _read_done(self, connection: _Connection) -> None:
        self._reading.pop(connection, None)

    def _read_deadlines(self) -> None:
        """Fail every connection whose read deadline passed; re-arm for the oldest left."""
        self._read_timer = None
        loop = self._loop
        assert loop is not None
        now = loop.time()
        expired = []
        for connection, deadline in self._reading.items():
            if deadline > now:
                self._read_timer = loop.call_at(deadline, self._read_deadlines)
                break
            expired.append(connection)
        for connection in expired:
            self._reading.pop(connection, None)
            connection.read_timed_out()

    def _released(self) -> None:
        self._active -= 1
        if self._active == 0 and self._closing:
            self._idle()

    def _idle(self) -> None:
        """Closed with nothing left in flight: drop the read timer and wake `wait`."""
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        self._events()[1].set()

    def _hook(self, hook: Callable[..., object], *args: object) -> None:
        try:
            hook(*args)
        except Exception:
            self._logger.exception("trigger server hook %s failed", getattr(hook, "__name__", hook))

    def _accepted(self, payload: P) -> None:
        if self._on_accepted is not None:
            self._hook(self._on_accepted, payload)
        elif self._logger.isEnabledFor(logging.INFO):
            self._logger.info(
                "triggered run queued",
                extra={"sched_trigger": TRIGGER_EXTERNAL, "sched_queue_depth": len(self.queue)},
            )

    def _rejected(self, payload: P, error: Exception) -> None:
        if self._on_rejected is not None:
            self._hook(self._on_rejected, payload, error)
        else:
            self._logger.warning(
                "trigger request rejected: %s",
                error,
                extra={"sched_trigger": TRIGGER_EXTERNAL, "sched_reason": str(error)},
            )

    def _cut_short(self) -> None:
        self._logger.warning(
            "trigger request rejected: %s (the request was still being read)",
            CLOSED_MESSAGE,
            extra={"sched_trigger": TRIGGER_EXTERNAL, "sched_reason": CLOSED_MESSAGE},
        )

    def _undecodable(self, error: Exception) -> None:
        self._logger.warning(
            "trigger request rejected: %s (%s)",
            UNDECODABLE_REASON,
            error,
            extra={"sched_trigger": TRIGGER_EXTERNAL, "sched_reason": UNDECODABLE_REASON},
        )


@final
class _Connection(asyncio.Protocol):
    """One client: read one request, then stream its events; never strands the client.

    Events produced in one turn of the event loop go out in one write (for a
    job that starts and finishes at once, ``queued``, ``started`` and ``done``
    are one send): the bytes on the wire are the same, the system calls fewer.
    """

    __slots__ = (
        "_advance_pending",
        "_close_pending",
        "_job",
        "_lost",
        "_out",
        "_reader",
        "_sent_started",
        "_server",
        "_state",
        "_transport",
        "_write_timer",
    )

    def __init__(self, server: Server[Any]) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._reader = RequestReader(server._max_request_size)
        self._state = _READING
        self._job: Job[Any] | None = None
        self._sent_started = False
        self._lost = False
        self._out: list[bytes] = []
        self._close_pending = False
        self._advance_pending = False
        self._write_timer: asyncio.TimerHandle | None = None

    @property
    def connected(self) -> bool:
        """Whether the loop has handed this protocol its transport."""
        return self._transport is not None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # a unix stream transport
        self._server._opened(self)

    def data_received(self, data: bytes) -> None:
        if self._state != _READING:
            # One request per connection: nothing after it is read. Bytes that
            # follow it stop the reading here (at most one read's worth is taken
            # in); the socket buffer then fills and the client blocks, as with the
            # Go server. A client that sends just its request costs no extra call.
            transport = self._transport
            if transport is not None and transport.is_reading():
                transport.pause_reading()
            return
        try:
            done, value = self._reader.feed(data)
        except Undecodable as exc:
            self._fail(exc)
            return
        if done:
            self._request(value)

    def eof_received(self) -> bool:
        if self._state == _READING:
            try:
                value = self._reader.feed_eof()
            except Undecodable as exc:
                self._fail(exc)
            else:
                self._request(value)
        return True  # a half-closed client still reads its events

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._out.clear()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        if self._state == _READING:
            self._server._read_done(self)
        if self._state != _WAITING:
            self._state = _FINISHED
            self._server._released()
        # else: the accepted job is still pending; _advance releases once it finishes.

    def read_timed_out(self) -> None:
        """The server's read deadline for this connection passed."""
        if self._state == _READING:
            self._fail(Undecodable("request read timed out"))

    def cut_short(self) -> None:
        """The server is closing while this connection still reads its request."""
        if self._state != _READING:
            return
        self._state = _FINISHED
        self._server._cut_short()
        self._write(_CLOSED)
        self._close()

    def _fail(self, error: Exception) -> None:
        self._server._read_done(self)
        self._state = _FINISHED
        self._server._undecodable(error)
        self._write(_UNDECODABLE)
        self._close()

    def _request(self, value: Any) -> None:
        server = self._server
        server._read_done(self)
        decode = server._decode
        if decode is not None:
            try:
                payload = decode(value)
            except Undecodable as exc:  # the library's own: names types, never values
                self._fail(exc)
                return
            except Exception as exc:
                # A decoder's or validator's message may quote the payload: log the type only.
                self._fail(Undecodable(f"the decoder raised {type(exc).__name__}"))
                return
        else:
            payload = value
        job: Job[Any] = Job(TRIGGER_EXTERNAL, payload)
        # Listen before submitting: an executor on another thread may start (even
        # finish) the job before this returns; its wake-up runs after the queued line.
        job._subscribe(self._job_changed)
        try:
            server.queue.submit(job)
        except (QueueFull, QueueClosed) as exc:
            job._unsubscribe(self._job_changed)
            self._state = _FINISHED
            server._rejected(payload, exc)
            self._write(encode_event(EVENT_DONE, False, str(exc)))
            self._close()
            return
        self._state = _WAITING
        self._job = job
        server._accepted(payload)
        self._write(_QUEUED)

    def _job_changed(self) -> None:
        server = self._server
        if threading.get_ident() == server._thread:
            self._advance()
            return
        if self._advance_pending:
            return  # the loop has not run the last wake-up yet: it will see this change too
        self._advance_pending = True
        server._changed_elsewhere(self)

    def catch_up(self) -> None:
        """On the loop, after another thread changed the job: send what it produced.

        What the worker produced is complete for this turn: it is written now
        rather than one more turn of the loop later.
        """
        self._advance()
        self._flush()

    def _advance(self) -> None:
        self._advance_pending = False
        job = self._job
        if job is None or self._state != _WAITING:
            return
        if job._started and not self._sent_started:
            self._sent_started = True
            self._write(_STARTED)
        outcome = job.outcome
        if outcome is None:
            return
        self._state = _FINISHED
        self._write(_done(outcome.ok, outcome.reason, outcome.duration_ms))
        if self._lost:
            self._server._released()
        else:
            self._close()

    def _write(self, data: bytes) -> None:
        if self._lost:
            return
        if not self._out:
            loop = self._server._loop
            assert loop is not None
            loop.call_soon(self._flush)
        self._out.append(data)

    def _flush(self) -> None:
        transport = self._transport
        if not self._out or transport is None or transport.is_closing():
            self._out.clear()
            return
        data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        self._out.clear()
        transport.write(data)
        if self._write_timer is None and transport.get_write_buffer_size():
            loop = self._server._loop
            assert loop is not None
            self._write_timer = loop.call_later(self._server._write_timeout, self._write_timed_out)
        if self._close_pending:
            transport.close()

    def _write_timed_out(self) -> None:
        self._write_timer = None
        transport = self._transport
        if transport is not None and transport.get_write_buffer_size():
            transport.abort()

    def _close(self) -> None:
        if self._out:
            self._close_pending = True
        elif self._transport is not None:
            self._transport.close()


def _done(ok: bool, reason: str, duration_ms: int) -> bytes:
    """The final event's line; the common reasonless ones are built once."""
    if not reason and not duration_ms:
        return _DONE_OK if ok else _DONE_FAILED
    return encode_event(EVENT_DONE, ok, reason, duration_ms)
