"""The socket server that feeds the queue and streams each request's events: `Server`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import socket
import sys
import threading
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from functools import partial
from typing import Any, Generic, TypeVar, final

from ._durations import Duration, to_seconds
from ._errors import CLOSED_MESSAGE, FULL_MESSAGE, QueueClosed, QueueFull
from ._job import TRIGGER_EXTERNAL, Job
from ._listen import DEFAULT_BACKLOG, unlink_if_ours
from ._payload import dataclass_decoder
from ._queue import Queue
from ._request import NOTHING, Pairs, RequestReader, Undecodable, whole
from ._wire import EVENT_DONE, EVENT_QUEUED, EVENT_STARTED, MAX_EVENT_LINE, encode_event

__all__ = ["DEFAULT_MAX_QUEUED_BYTES", "UNDECODABLE_REASON", "Server"]

P = TypeVar("P")

#: The ``done`` reason for a request that is not one JSON value within the cap.
UNDECODABLE_REASON = "undecodable request"
#: How many request bytes the requests waiting in the queue may hold together, by default.
DEFAULT_MAX_QUEUED_BYTES = 16 * 1024 * 1024

_LOGGER = logging.getLogger("sched_trigger")
_get_ident = threading.get_ident
_QUEUED = encode_event(EVENT_QUEUED, False)
_STARTED = encode_event(EVENT_STARTED, False)
_UNDECODABLE = encode_event(EVENT_DONE, False, UNDECODABLE_REASON)
_CLOSED = encode_event(EVENT_DONE, False, CLOSED_MESSAGE)
_FULL = encode_event(EVENT_DONE, False, FULL_MESSAGE)
_DONE_OK = encode_event(EVENT_DONE, True)
_DONE_FAILED = encode_event(EVENT_DONE, False)

_READING, _DECODING, _WAITING, _FINISHED = 0, 1, 2, 3
#: How many connections one wake-up of the listening socket accepts at most.
_ACCEPT_BATCH = 128
#: How long accepting pauses after it failed (Go's server sleeps one second).
_ACCEPT_PAUSE = 1.0
#: What a connection still in the backlog at shutdown has read from it, at most.
_DRAIN = 64 * 1024
#: A request this large has its further reads this large framed by the server's pump.
_FRAME_NOW = 64 * 1024
#: Below this many descriptors left, the server accepts by hand rather than through uvloop.
_FD_HEADROOM = 64
#: The descriptor limit (a system call) is read again once every this many connections.
_FD_LIMIT_EVERY = 8
#: Below this many descriptors left by the estimate, the limit is read for every connection.
_FD_NEAR = 4 * _FD_HEADROOM


def _open_descriptors() -> int:
    """How many descriptors the process has open (Linux, macOS), or -1 if unknown."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder))  # noqa: PTH208  # a count, no Path objects
        except OSError:
            continue
    return -1


@final
class Server(Generic[P]):
    """Accept trigger requests on a listening unix socket and stream their events back.

    One request per connection: the server decodes one JSON value as soon as
    it has arrived (no trailing newline needed; reading stops there),
    as Go's ``encoding/json`` decodes it, into *payload_type* (a dataclass:
    fields checked by type, the object's members applied in order as Go fills
    a struct, keys matched ignoring case, unknown keys ignored), or through
    *decode*, or leaves it as the parsed JSON; it submits a `Job` with trigger
    `TRIGGER_EXTERNAL` to *queue* and answers:

    * accepted: ``queued``, then ``started`` when the run begins, then exactly
      one ``done`` carrying ``ok``, ``duration_ms`` and ``reason`` (a reason
      whose line would pass 64 KiB is cut to fit and says so);
    * rejected: ``done`` with ``ok`` false and the queue's message
      (``run queue is full``, ``scheduler is shutting down``); a request that
      would take the bytes held by queued requests past *max_queued_bytes*
      is refused as the queue being full;
    * undecodable, oversized or too slow: ``done`` with ``ok`` false and
      ``undecodable request``.

    A large request is framed a read at a time and decoded in slices of a
    few milliseconds, one piece per turn of the loop for all large requests
    together, so other clients are served meanwhile.

    Without hooks the server logs ``triggered run queued`` (info) and
    ``trigger request rejected: <reason>`` (warning); it never logs a payload,
    nor any part of one. Hooks run on the event loop and replace those lines
    one hook at a time: *on_accepted* replaces the accepted line,
    *on_rejected* the queue-full and shutting-down lines. Undecodable requests,
    and requests refused for the byte budget before they were decoded (there
    is no payload to hand a hook), are logged whatever hooks are set, without
    the payload.

    Shutdown order: `close` (stop accepting), ``queue.close()``, await the
    executor, then await `wait_closed`.

    Args:
        queue: where accepted requests go.
        payload_type: a dataclass type to decode requests into.
        decode: a callable from the parsed JSON to the payload (an exception
            makes the request undecodable); exclusive with *payload_type*.
        on_accepted: ``on_accepted(payload)`` for each accepted request.
        on_rejected: ``on_rejected(payload, error)`` for each rejected one.
        read_timeout: bound on reading the request (default 30 s; positive).
        write_timeout: bound on each event write (default 10 s; positive).
        max_request_size: the request size cap in bytes (default 8 MiB).
        max_queued_bytes: the request bytes that requests waiting in the queue
            may hold together (default 16 MiB).
            A decoded payload takes several times its request's bytes in
            memory (up to about 25 times for ``[{},{},…]``).
        backlog: the accept backlog (0 or more).
        logger: where the default lines go (default ``sched_trigger``).

    Raises:
        ValueError: both *payload_type* and *decode*, or a bound out of range
            (a timeout not above zero, a size below one, a negative backlog).
        TypeError: *payload_type* is not a dataclass type, or a size or the
            backlog is not an ``int``.
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
        max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
        backlog: int = DEFAULT_BACKLOG,
        logger: logging.Logger | None = None,
    ) -> None:
        if payload_type is not None and decode is not None:
            raise ValueError("pass payload_type or decode, not both")
        self._pairs = payload_type is not None
        if payload_type is not None:
            decode = dataclass_decoder(payload_type)
        self._read_timeout = _positive(read_timeout, "read_timeout")
        self._write_timeout = _positive(write_timeout, "write_timeout")
        self._max_request_size = _count(max_request_size, "max_request_size", 1)
        self._max_queued_bytes = _count(max_queued_bytes, "max_queued_bytes", 1)
        self._backlog = _count(backlog, "backlog", 0)
        self.queue = queue
        self._decode = decode
        self._on_accepted = on_accepted
        self._on_rejected = on_rejected
        self._logger = logger if logger is not None else _LOGGER
        self._sock: socket.socket | None = None
        self._socket_file: tuple[str, tuple[int, int]] | None = None
        self._accepting = False
        self._accept_timer: asyncio.TimerHandle | None = None
        # The loop's own server, where the server accepts through it (uvloop).
        self._loop_server: asyncio.AbstractServer | None = None
        # The loop server's protocol factory: a connection, counted once it is made.
        self._new_connection: Callable[[], _Connection] = partial(_Connection, self)
        self._loop_server_socket: _WatchedSocket | None = None
        self._server_timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self._restarting: asyncio.Task[None] | None = None
        # Descriptors open when serving began (-1: not counted, accepting by hand).
        self._fd_base = -1
        self._fd_limit = 0  # the soft limit, as last read (0: not read yet)
        self._fd_checks = 0  # connections the loop's server made (the limit is read every 8th)
        # Accepted connections whose transport is still being set up.
        self._starting_up: set[Coroutine[Any, Any, Any]] = set()
        self._active = 0
        # Request bytes held by accepted requests whose run has not started yet.
        self._queued_bytes = 0
        # Connections still reading their request, oldest first, with their deadlines:
        # one timer bounds them all. It is left armed when the server goes idle (it
        # then fires once, finds nothing and stops): cheaper than a timer per request.
        self._reading: dict[_Connection, float] = {}
        self._decoding: set[_Connection] = set()
        self._pumping: deque[_Connection] = deque()  # their next slices, in turn
        self._pump_scheduled = False
        # Finished jobs whose large payloads wait to be freed in slices: [job, turns left].
        self._reclaiming: deque[list[Any]] = deque()
        # Large values nothing else holds, freed a slice per turn, in turn (see _free_some).
        self._freeing: deque[list[Any]] = deque()
        # Connections whose job changed on another thread (an executor's worker),
        # advanced together by one wake-up of the loop.
        self._changed: deque[_Connection] = deque()
        self._wake_scheduled = False
        # Connections with lines to write: written together at the end of the turn,
        # by one callback (a connection's queued, started and done leave in one write
        # when its run starts and finishes in the same turn).
        self._unflushed: deque[_Connection] = deque()
        self._flush_scheduled = False
        self._read_timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0
        self._closing = False
        self._closed_event: asyncio.Event | None = None
        self._idle_event: asyncio.Event | None = None

    async def serve(self, sock: socket.socket) -> None:
        """Serve *sock* (from `listen`) until `close` is called.

        Returns once the server stops accepting; requests in progress go on
        (see `wait_closed`). If the task running `serve` is cancelled, the
        server closes.

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
        loop = self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        try:
            sock.setblocking(False)
            sock.listen(self._backlog)
            if isinstance(loop, asyncio.BaseEventLoop):
                self._start_accepting()  # asyncio's own loops: accept here (see _accept)
            else:
                self._fd_base = _open_descriptors()
                await self._start_loop_server()
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

        New connections are refused from now on, and every connection still
        waiting in the accept backlog, or still sending its request, is
        answered ``done`` with ``scheduler is shutting down`` and closed at
        once: no client is reset, and shutdown never waits for a silent one.
        Call it on the server's event loop thread.
        """
        self._closing = True
        self._close_socket()
        self._events()[0].set()
        reading, self._reading = list(self._reading), {}
        decoding, self._decoding = list(self._decoding), set()
        for connection in reading + decoding:
            connection.cut_short()
        if self._active == 0:
            self._idle()

    def _is_closing(self) -> bool:
        return self._closing  # a call: the attribute may change across an await

    async def wait_closed(self) -> None:
        """Wait until the server is closed and every request has its final event on the wire."""
        closed, idle = self._events()
        await closed.wait()
        await idle.wait()

    async def wait(self) -> None:
        """The same as `wait_closed` (the Go library's name, ``Server.Wait``)."""
        await self.wait_closed()

    async def _start_loop_server(self) -> None:
        """Accept through the loop's own server (uvloop's accepts in C), on a duplicate.

        The loop server owns a duplicate of the listening socket: when the loop
        gives up on it (uvloop closes its server when accepting fails, out of
        descriptors), the duplicate's ``detach`` says so, the listening socket
        itself stays open, and a new loop server takes over after a second.
        """
        self._server_timer = None
        sock, loop = self._sock, self._loop
        if self._closing or sock is None or loop is None or self._loop_server is not None:
            return
        if self._descriptors_left() < _FD_HEADROOM:
            self._start_accepting()
            return
        watched = _WatchedSocket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=os.dup(sock.fileno()))
        watched.lost = self._loop_server_lost
        options: dict[str, Any] = {"sock": watched, "backlog": self._backlog}
        try:
            try:
                keep_file: dict[str, Any] = {**options, "cleanup_socket": False}
                server = await loop.create_unix_server(self._new_connection, **keep_file)
            except TypeError:  # a loop without the option never removes the file
                server = await loop.create_unix_server(self._new_connection, **options)
        except BaseException:
            watched.lost = None
            watched.close()
            raise
        if self._is_closing():
            watched.lost = None
            server.close()
            return
        self._loop_server = server
        self._loop_server_socket = watched

    def _loop_server_lost(self) -> None:
        """The loop closed its server without being asked: pause a second, then anew."""
        loop = self._loop
        if self._closing or loop is None or self._accepting:
            return
        self._loop_server = None
        self._logger.warning(
            "trigger socket accept failed: %s; pausing accepts for 1s",
            "the event loop stopped accepting",
            extra={"sched_error": "the event loop stopped accepting"},
        )
        self._server_timer = loop.call_later(_ACCEPT_PAUSE, self._restart_loop_server)

    def _restart_loop_server(self) -> None:
        self._server_timer = None
        loop = self._loop
        if loop is None or self._restarting is not None or self._closing:
            return
        task = loop.create_task(self._start_loop_server())
        self._restarting = task
        task.add_done_callback(self._restarted)

    def _restarted(self, task: asyncio.Task[None]) -> None:
        self._restarting = None
        if task.cancelled():
            return
        error = task.exception()
        if error is not None and not self._closing:
            self._logger.error(
                "trigger socket accept failed: %s; not accepting any more",
                error,
                extra={"sched_error": str(error)},
            )

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
        if self._server_timer is not None:
            self._server_timer.cancel()
            self._server_timer = None
        if self._restarting is not None:
            self._restarting.cancel()
        server, self._loop_server = self._loop_server, None
        watched, self._loop_server_socket = self._loop_server_socket, None
        if watched is not None:
            watched.lost = None  # closing it now is ours, not a failure
        if server is not None:
            server.close()
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
        connection.counted = True
        self._active += 1
        if self._closing and self._idle_event is not None:
            self._idle_event.clear()  # (only a closing server is ever idle)
        try:
            setup = loop.connect_accepted_socket(connection.itself, conn)
        except BaseException:
            conn.close()
            self._released()
            raise
        # Stepped by hand rather than by a Task: it only awaits the future that
        # connection_made resolves, and a Task per connection costs a third of a
        # round trip on uvloop.
        self._starting_up.add(setup)
        _step_setup(setup, self, connection, conn)

    def _setup_failed(self, connection: _Connection, conn: socket.socket) -> None:
        if not connection.connected:  # never connected: the socket is ours
            conn.close()
            self._released()

    def _events(self) -> tuple[asyncio.Event, asyncio.Event]:
        if self._closed_event is None or self._idle_event is None:
            self._closed_event = asyncio.Event()
            self._idle_event = asyncio.Event()
        return self._closed_event, self._idle_event

    def _advance_changed(self) -> None:
        self._wake_scheduled = False  # first: a change after this schedules a new wake-up
        changed = self._changed
        # What the worker produced is complete: it is written now, not a turn later.
        scheduled, self._flush_scheduled = self._flush_scheduled, True
        while changed:
            changed.popleft().job_changed()  # on the loop now: it queues what the job did
        self._flush_scheduled = scheduled
        self._write_out()

    def _dirty(self, connection: _Connection) -> None:
        """*connection* has lines to write: they leave with the others' at the end of the turn."""
        self._unflushed.append(connection)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop = self._loop
            assert loop is not None
            loop.call_soon(self._flush)

    def _flush(self) -> None:
        """The end of a turn: write every connection's lines, then wake the workers handed jobs."""
        self._flush_scheduled = False
        unflushed = self._unflushed
        while unflushed:
            unflushed.popleft().flush()
        if self.queue._unwoken:  # (filled by this thread only: see Queue._submit)
            self.queue._wake_deferred()

    def _write_out(self) -> None:
        unflushed = self._unflushed
        while unflushed:
            unflushed.popleft().flush()

    def _pump_later(self, connection: _Connection) -> None:
        """Queue *connection*'s next piece of work: one piece per turn, round robin.

        However many large requests are being read and decoded, a turn of the
        loop frames one read, or decodes one slice, of one of them: every other
        client waits for one piece at most, not for one piece of each.
        """
        self._pumping.append(connection)
        if not self._pump_scheduled:
            self._pump_scheduled = True
            loop = self._loop
            assert loop is not None
            loop.call_soon(self._pump)

    def _pump(self) -> None:
        self._pump_scheduled = False
        if self._pumping:
            self._pumping.popleft().step()
        if self._pumping and not self._pump_scheduled:
            self._pump_scheduled = True
            loop = self._loop
            assert loop is not None
            loop.call_soon(self._pump)

    def _close_socket(self) -> None:
        self._stop_accepting()
        sock = self._sock
        if sock is not None and sock.fileno() >= 0:
            self._drain_backlog(sock)
        if self._socket_file is not None:
            unlink_if_ours(*self._socket_file)
            self._socket_file = None
        if sock is not None:
            sock.close()

    def _drain_backlog(self, sock: socket.socket) -> None:
        """Refuse new connections, then answer each one in the backlog: none is reset."""
        with contextlib.suppress(OSError):
            # A listening unix socket shut down refuses connects (ECONNREFUSED: the
            # client reports the request as not sent) but still hands out the ones
            # already queued. Where it cannot be (macOS), the window is the drain's.
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.setblocking(False)
        answered = 0
        while True:
            try:
                conn, _ = sock.accept()
            except InterruptedError:
                continue
            except OSError:
                break
            with conn:
                conn.setblocking(False)
                with contextlib.suppress(OSError):
                    conn.send(_CLOSED)
                    conn.recv(_DRAIN)  # what the client sent: unread bytes would reset it
            answered += 1
        if answered:
            self._logger.warning(
                "trigger request rejected: %s (%d connections still waiting to be accepted)",
                CLOSED_MESSAGE,
                answered,
                extra={
                    "sched_trigger": TRIGGER_EXTERNAL,
                    "sched_reason": CLOSED_MESSAGE,
                    "sched_connections": answered,
                },
            )

    def _opened(self, connection: _Connection) -> None:
        if not connection.counted:  # made by the loop's own server
            connection.counted = True
            self._active += 1
            if self._closing and self._idle_event is not None:
                self._idle_event.clear()  # (only a closing server is ever idle)
            self._fd_checks += 1
            if (
                self._fd_checks % _FD_LIMIT_EVERY == 0
                or self._fd_limit - self._fd_base - self._active < _FD_NEAR
            ) and self._descriptors_left() < _FD_HEADROOM:
                self._accept_by_hand()
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
        if self._closing or self._accepting:
            self._after_release()

    def _after_release(self) -> None:
        """A connection ended while closing, or while accepting by hand: the rest of `_released`."""
        if self._active == 0 and self._closing:
            self._idle()
        elif (
            self._fd_base >= 0
            and self._accepting
            and self._accept_timer is None
            and self._descriptors_left() > 2 * _FD_HEADROOM
        ):
            # Descriptors are plentiful again: back to the loop's own server.
            self._stop_accepting()
            loop = self._loop
            assert loop is not None
            self._server_timer = loop.call_soon(self._restart_loop_server)

    def _descriptors_left(self) -> int:
        """About how many more descriptors this process may open (the soft limit's rest).

        Counted from the descriptors open when serving began plus the
        connections in flight; counted afresh from ``/proc/self/fd`` when
        that estimate comes near the limit.
        """
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self._fd_limit = 1 << 30 if limit == resource.RLIM_INFINITY else limit
        left = self._fd_limit - self._fd_base - self._active
        if left < 4 * _FD_HEADROOM:
            counted = _open_descriptors()
            if counted >= 0:
                self._fd_base = counted - self._active
                left = limit - counted
        return left

    def _accept_by_hand(self) -> None:
        """Few descriptors left: accept here, where running out pauses accepting.

        uvloop's server, out of descriptors, closes every connection waiting in
        the backlog (libuv's way); accepting here pauses for a second instead,
        as the Go server does, and the clients wait.
        """
        if self._closing or self._accepting or self._accept_timer is not None:
            return
        server, self._loop_server = self._loop_server, None
        watched, self._loop_server_socket = self._loop_server_socket, None
        if watched is not None:
            watched.lost = None
        if server is not None:
            server.close()
        self._start_accepting()

    def _idle(self) -> None:
        """Closed with nothing left in flight: drop the timers and wake `wait_closed`."""
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

    def _reclaim(self, job: Job[Any]) -> None:
        """Free a finished job's large payload a slice at a time, once only we hold it."""
        self._reclaiming.append([job, _RECLAIM_TURNS])
        if len(self._reclaiming) == 1:
            loop = self._loop
            assert loop is not None
            loop.call_soon(self._reclaim_turn)

    def _reclaim_turn(self) -> None:
        """Once nothing but this server holds a finished job, free its payload in slices.

        Freeing millions of objects is one long C call; a value nobody else can
        see may instead be taken apart a slice at a time. A job or payload still
        held elsewhere (an executor that kept the job, a run that kept the
        payload) after `_RECLAIM_TURNS` turns is left to be freed as usual.
        """
        loop = self._loop
        assert loop is not None
        waiting = self._reclaiming
        for _ in range(len(waiting)):
            entry = waiting.popleft()
            job = entry[0]
            entry[0] = None
            if sys.getrefcount(job) > 2:  # the name, and getrefcount's argument
                if entry[1]:
                    entry[0], entry[1] = job, entry[1] - 1
                    waiting.append(entry)
                continue
            payload = job.payload
            job.payload = None
            del job
            if sys.getrefcount(payload) <= 2:  # the name, and getrefcount's argument
                stack = [payload]
                del payload
                self._free_later(stack)
            else:
                del payload
        if waiting:
            loop.call_soon(self._reclaim_turn)

    def _free_later(self, stack: list[Any]) -> None:
        """Free what *stack* holds a slice at a time, in turn with any other.

        However many large values are let go at once (eight requests decoded side
        by side finish side by side), a turn of the loop frees at most
        `_FREE_SLICES` slices among them: freeing, like decoding, holds every
        other client for a few slices at most, and still keeps up with what the
        decoding of large requests (a slice per turn) makes.
        """
        self._freeing.append(stack)
        if len(self._freeing) == 1:
            loop = self._loop
            assert loop is not None
            loop.call_soon(self._free_turn)

    def _free_turn(self) -> None:
        freeing = self._freeing
        for _ in range(min(len(freeing), _FREE_SLICES)):
            stack = freeing.popleft()
            _free_some(stack)
            if stack:
                freeing.append(stack)
        if freeing:
            loop = self._loop
            assert loop is not None
            loop.call_soon(self._free_turn)

    def _over_budget(self, size: int) -> None:
        """A request refused before decoding: the queued requests hold the byte budget."""
        self._logger.warning(
            "trigger request rejected: %s (its %d bytes would take the queued requests past "
            "max_queued_bytes, %d)",
            FULL_MESSAGE,
            size,
            self._max_queued_bytes,
            extra={
                "sched_trigger": TRIGGER_EXTERNAL,
                "sched_reason": FULL_MESSAGE,
                "sched_request_bytes": size,
                "sched_max_queued_bytes": self._max_queued_bytes,
            },
        )

    def _undecodable(self, error: Exception) -> None:
        self._logger.warning(
            "trigger request rejected: %s (%s)",
            UNDECODABLE_REASON,
            error,
            extra={"sched_trigger": TRIGGER_EXTERNAL, "sched_reason": UNDECODABLE_REASON},
        )


#: Elements freed at a time when a large decoded value is let go.
_FREE_SLICE = 8 * 1024
#: At most this many slices freed per turn of the loop, among every value let go.
_FREE_SLICES = 2
#: How many turns a finished job's payload is waited for, to be ours alone.
_RECLAIM_TURNS = 64
_CONTAINERS = (list, dict, Pairs)


def free_in_slices(server: Server[Any], holder: list[Any]) -> None:
    """Free ``holder[0]`` (which nothing else holds) a slice at a time, from the next turn."""
    value = holder.pop()
    if value.__class__ in _CONTAINERS and len(value) >= _FREE_SLICE and sys.getrefcount(value) <= 2:
        stack = [value]
        del value
        server._free_later(stack)


def _free_some(stack: list[Any]) -> None:
    """Take about `_FREE_SLICE` elements out of the containers on *stack* (what is left stays).

    Every container on *stack* is held by nothing else: an element that is a
    large container held by nothing else either is taken apart in turn rather
    than freed whole; anything held elsewhere only loses a reference.
    """
    budget = _FREE_SLICE
    while stack and budget > 0:
        top = stack.pop()
        found = []
        count = min(budget, len(top))
        if isinstance(top, list):
            chunk = top[len(top) - count :]
            del top[len(top) - count :]
            item = None
            for item in chunk:
                if item.__class__ is tuple and len(item) == 2:  # a member of Pairs
                    item = item[1]  # noqa: PLW2901
                # Held by chunk (or its tuple), this name and getrefcount's argument only.
                if (
                    item.__class__ in _CONTAINERS
                    and len(item) >= _FREE_SLICE
                    and sys.getrefcount(item) <= 3
                ):
                    found.append(item)
            del chunk, item
        else:
            for _ in range(count):
                _, item = top.popitem()
                # Held by this name and getrefcount's argument only.
                if (
                    item.__class__ in _CONTAINERS
                    and len(item) >= _FREE_SLICE
                    and sys.getrefcount(item) <= 2
                ):
                    found.append(item)
            item = None
        budget -= max(count, 1)
        if top:
            stack.append(top)
        del top
        stack.extend(found)
        del found


def _positive(value: Duration, name: str) -> float:
    seconds = to_seconds(value, name=name)
    if seconds <= 0:
        raise ValueError(f"{name} must be above zero, got {value!r}")
    return seconds


def _count(value: int, name: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < least:
        raise ValueError(f"{name} must be {least} or more, got {value}")
    return value


def _step_setup(
    setup: Coroutine[Any, Any, Any],
    server: Server[Any],
    connection: _Connection,
    conn: socket.socket,
    _: object = None,
) -> None:
    """Advance ``connect_accepted_socket`` to what it awaits next, or to its end."""
    try:
        awaited = setup.send(None)
    except StopIteration:
        server._starting_up.discard(setup)
        return
    except BaseException:
        server._starting_up.discard(setup)
        server._setup_failed(connection, conn)
        return
    if awaited is None:  # a bare yield: go again on the next turn of the loop
        loop = server._loop
        assert loop is not None
        loop.call_soon(_step_setup, setup, server, connection, conn)
    else:
        awaited.add_done_callback(
            lambda future: _step_setup(setup, server, connection, conn, future)
        )


@final
class _WatchedSocket(socket.socket):
    """A duplicate of the listening socket for the loop's server; says when it lets go.

    uvloop detaches the socket object it was given when it closes its server
    handle, for whatever reason: ``lost`` is then called on the loop.
    """

    __slots__ = ("lost",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lost: Callable[[], object] | None = None

    def detach(self) -> int:
        fd = super().detach()
        lost, self.lost = self.lost, None
        if lost is not None:
            with contextlib.suppress(RuntimeError):  # no running loop: nothing to restart
                asyncio.get_running_loop().call_soon(lost)
        return fd


@final
class _Connection(asyncio.Protocol):
    """One client: read one request, then stream its events; never strands the client.

    Events produced in one turn of the event loop go out in one write, at the
    end of the turn or as soon as ``done`` is produced (for a job that starts
    and finishes at once, ``queued``, ``started`` and ``done`` are one send):
    the bytes on the wire are the same, the system calls fewer. A job handed
    to a worker thread has its ``queued`` written at once (the rest comes in
    a later turn); what worker threads change is sent by one wake-up of the
    loop for every connection they changed meanwhile.
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
        "_size",
        "_state",
        "_steps",
        "_transport",
        "_unframed",
        "_write_timer",
        "counted",
    )

    def __init__(self, server: Server[Any]) -> None:
        self._server = server
        self.counted = False  # in the server's count of connections in flight
        self._transport: asyncio.Transport | None = None
        self._reader: RequestReader | None = None  # made for a request not in one read
        self._state = _READING
        self._steps: Generator[None, None, Any] | None = None
        self._unframed: list[bytes] | None = None  # reads waiting for the pump (b"": end)
        self._job: Job[Any] | None = None
        self._size = 0  # request bytes counted against the server's queued budget
        self._sent_started = False
        self._lost = False
        self._out: list[bytes] = []
        self._close_pending = False
        self._advance_pending = False
        self._write_timer: asyncio.TimerHandle | None = None

    def itself(self) -> _Connection:
        """The protocol factory handed to the loop: this very connection."""
        return self

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
        reader = self._reader
        if reader is None:
            server = self._server
            if len(data) <= server._max_request_size:
                value = whole(data, server._pairs)  # the common case: one line, one read
                if value is not NOTHING:
                    server._reading.pop(self, None)
                    self._request(value, len(data))
                    return
            reader = self._reader = RequestReader(server._max_request_size, pairs=server._pairs)
        elif self._unframed or (reader.size >= _FRAME_NOW and len(data) >= _FRAME_NOW):
            if self._unframed is None:
                self._unframed = []
            # A large request arriving in large reads: they are framed by the server's
            # pump, one per turn of the loop with every other large request's, and
            # reading pauses until this one is: a turn frames or decodes one piece,
            # however many arrive. (Small reads cost little: framed at once.)
            self._unframed.append(data)
            transport = self._transport
            if transport is not None and transport.is_reading():
                transport.pause_reading()
            self._server._pump_later(self)
            return
        self._frame(data)

    def _frame(self, data: bytes) -> None:
        """Frame one read of the request; decode it once it is complete."""
        reader = self._reader
        assert reader is not None
        try:
            complete = reader.feed(data)
        except Undecodable as exc:
            self._fail(exc)
            return
        if complete:
            self._decode()

    def eof_received(self) -> bool:
        if self._state == _READING:
            if self._unframed:
                self._unframed.append(b"")  # the end, after what waits to be framed
                return True
            self._end_of_request()
        return True  # a half-closed client still reads its events

    def _end_of_request(self) -> None:
        """The client half-closed while its request was read: decode what came."""
        if self._reader is None:
            server = self._server
            self._reader = RequestReader(server._max_request_size, pairs=server._pairs)
        try:
            self._reader.feed_eof()
        except Undecodable as exc:
            self._fail(exc)
        else:
            self._decode()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._out.clear()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        if self._state == _READING:
            self._server._read_done(self)
        if self._state == _DECODING:
            self._server._decoding.discard(self)
            self._unreserve()
        if self._state != _WAITING:
            self._state = _FINISHED
            server = self._server
            server._active -= 1  # (`_released`, inlined)
            if server._closing or server._accepting:
                server._after_release()
        # else: the accepted job is still pending; job_changed releases once it finishes.

    def read_timed_out(self) -> None:
        """The server's read deadline for this connection passed."""
        if self._state == _READING:
            self._fail(Undecodable("request read timed out"))

    def cut_short(self) -> None:
        """The server is closing while this connection still reads or decodes its request."""
        if self._state not in (_READING, _DECODING):
            return
        self._unreserve()
        self._state = _FINISHED
        self._server._cut_short()
        self._write(_CLOSED)
        self._close()

    def _decode(self) -> None:
        """The request is framed: decode it now, in slices if it is large."""
        server = self._server
        server._read_done(self)
        reader = self._reader
        assert reader is not None
        if not self._reserve(reader.size):
            # Refused before decoding: a decoded payload takes many times its bytes.
            self._state = _FINISHED
            server._over_budget(reader.size)
            self._write(_FULL)
            self._close()
            return
        self._state = _DECODING
        self._steps = reader.decoding()
        self.step()

    def _reserve(self, size: int) -> bool:
        """Count *size* request bytes against the server's budget, if they fit in it."""
        server = self._server
        if server._queued_bytes + size > server._max_queued_bytes:
            return False
        server._queued_bytes += size
        self._size = size
        return True

    def _unreserve(self) -> None:
        if self._size:
            self._server._queued_bytes -= self._size
            self._size = 0

    def step(self) -> None:
        """One piece of work, from the server's pump: frame one read, or decode a slice."""
        if self._state == _READING and self._unframed:
            data = self._unframed.pop(0)
            if data:
                self._frame(data)
            else:
                self._end_of_request()
            if self._state == _READING:
                if self._unframed:
                    self._server._pump_later(self)
                elif self._transport is not None and not self._lost:
                    self._transport.resume_reading()
            return
        steps = self._steps
        if steps is None or self._state != _DECODING:
            return
        try:
            next(steps)
        except StopIteration as stop:
            self._steps = None
            self._server._decoding.discard(self)
            assert self._reader is not None
            self._request(stop.value, self._reader.size)
            return
        except Undecodable as exc:
            self._steps = None
            self._server._decoding.discard(self)
            self._fail(exc)
            return
        self._server._decoding.add(self)
        self._server._pump_later(self)

    def _fail(self, error: Exception) -> None:
        self._server._read_done(self)
        self._unreserve()
        self._state = _FINISHED
        self._server._undecodable(error)
        self._write(_UNDECODABLE)
        self._close()

    def _request(self, value: Any, size: int) -> None:
        """Decode *value* into the payload and submit it; *size*: the request's bytes."""
        server = self._server
        decode = server._decode
        if decode is not None:
            holder = [value]
            del value
            try:
                payload = decode(holder[0])
            except Undecodable as exc:  # the library's own: names types, never values
                self._fail(exc)
                return
            except Exception as exc:
                # A decoder's or validator's message may quote the payload: log the type only.
                self._fail(Undecodable(f"the decoder raised {type(exc).__name__}"))
                return
            finally:
                free_in_slices(server, holder)  # the parsed JSON, once converted
        else:
            payload = value
        job: Job[Any] = Job(TRIGGER_EXTERNAL, payload)
        self._job = job
        # Listen before submitting: an executor on another thread may start (even
        # finish) the job before this returns; its wake-up runs after the queued line.
        # (No other thread has the job yet: its listener list is ours to fill.)
        job._listeners.append(self.job_changed)
        try:
            if not self._size:
                if server._queued_bytes + size > server._max_queued_bytes:
                    raise QueueFull
                server._queued_bytes += size
                self._size = size
            # With other requests in flight, a worker handed this job is woken at the end of
            # the turn (by _flush), with every other job the turn queued: woken now, it would
            # take the GIL between the loop's callbacks, one job at a time. Alone, it is woken
            # now: its waking up overlaps the rest of the turn.
            queue: Queue[Any] = server.queue  # ours (the private-attribute linter reads this)
            handed_to_a_thread = queue._submit(job, server._active > 1)
        except (QueueFull, QueueClosed) as exc:
            self._unreserve()
            job._unsubscribe(self.job_changed)
            self._job = None
            self._state = _FINISHED
            server._rejected(payload, exc)
            self._write(encode_event(EVENT_DONE, False, str(exc)))
            self._close()
            return
        self._state = _WAITING
        out = self._out
        if handed_to_a_thread:
            # Its started and done come in a later turn (the worker needs the GIL this turn
            # holds): nothing is gained by waiting to write queued.
            out.append(_QUEUED)
            self.flush()
        else:
            if not out:
                server._dirty(self)  # (whatever a hook does, _flush runs: it wakes the worker)
            out.append(_QUEUED)
        if server._on_accepted is not None or server._logger.isEnabledFor(logging.INFO):
            server._accepted(payload)

    def job_changed(self) -> None:
        """The job's listener: it started or finished. On the loop, queue what it produced."""
        server = self._server
        if _get_ident() != server._thread:
            if self._advance_pending:
                return  # the loop has not run the last wake-up yet: it will see this change too
            self._advance_pending = True
            # Advanced on the loop with every other connection changed meanwhile: one
            # wake-up of the loop for them all.
            server._changed.append(self)
            if server._wake_scheduled:
                return  # a wake-up is on its way: it drains what this added
            server._wake_scheduled = True
            loop = server._loop
            if loop is not None:
                try:  # noqa: SIM105  # suppress() costs a context manager on every sync run
                    loop.call_soon_threadsafe(server._advance_changed)
                except RuntimeError:
                    pass  # a closed loop took the connections along
            return
        self._advance_pending = False
        job = self._job
        if job is None or self._state != _WAITING:
            return
        started = job._started
        outcome = job._outcome
        if self._size and (started or outcome is not None):
            server._queued_bytes -= self._size  # no longer waiting in the queue
            self._size = 0
        out = self._out
        if started and not self._sent_started:
            self._sent_started = True
            if not self._lost:
                if not out:
                    server._dirty(self)
                out.append(_STARTED)
        if outcome is None:
            return
        self._state = _FINISHED
        self._job = None
        payload = job.payload
        if payload.__class__ in _CONTAINERS and len(payload) >= _FREE_SLICE:
            del payload
            server._reclaim(job)
        if self._lost:
            server._released()
            return
        if outcome.reason or outcome.duration:
            line = _done(outcome.ok, outcome.reason, outcome.duration_ms)
        else:
            line = _DONE_OK if outcome.ok else _DONE_FAILED
        # The last line: whatever this turn produced for this client leaves now, in
        # one write, and the connection closes (nothing is gained by waiting).
        out.append(line)
        self._close_pending = True
        self.flush()

    def _write(self, data: bytes) -> None:
        if self._lost:
            return
        if not self._out:
            self._server._dirty(self)
        self._out.append(data)

    def flush(self) -> None:
        """Write what this turn of the loop produced, in one write (the server calls it)."""
        transport = self._transport
        out = self._out
        if not out or transport is None or transport.is_closing():
            out.clear()
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        transport.write(data)
        if self._write_timer is None and transport.get_write_buffer_size():
            server = self._server
            loop = server._loop
            assert loop is not None
            self._write_timer = loop.call_later(server._write_timeout, self._write_timed_out)
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
    """The final event's line; the common reasonless ones are built once.

    A reason whose line would pass `MAX_EVENT_LINE` bytes is cut at a
    character so that the line fits, ending in ``[reason truncated: N bytes]``.
    """
    if not reason and not duration_ms:
        return _DONE_OK if ok else _DONE_FAILED
    line = encode_event(EVENT_DONE, ok, reason, duration_ms)
    if len(line) <= MAX_EVENT_LINE:
        return line
    note = f" [reason truncated: {len(reason.encode('utf-8', 'surrogatepass'))} bytes]"
    low, high = 0, min(len(reason), MAX_EVENT_LINE)
    while low < high:  # the longest head whose line fits (escapes make it shorter)
        middle = (low + high + 1) // 2
        if len(encode_event(EVENT_DONE, ok, reason[:middle] + note, duration_ms)) <= MAX_EVENT_LINE:
            low = middle
        else:
            high = middle - 1
    return encode_event(EVENT_DONE, ok, reason[:low] + note, duration_ms)
