"""The clients, submit and asubmit: errors, relaying, timeouts, clean disconnects."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import os
import pwd
import resource
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sched_trigger_testkit import (
    DEADLINE,
    RawServer,
    foreign_server,
    in_thread,
    received,
    run_async,
    socket_dir,
    wire_text,
)

from sched_trigger import (
    DIAL_TIMEOUT,
    ConnectionLost,
    Event,
    Outcome,
    SendFailed,
    SubmitCancelled,
    SubmitTimeout,
    TriggerError,
    Unreachable,
    _client,
    asubmit,
    run_broker_in_thread,
    submit,
)
from sched_trigger._client import LINE_LIMIT
from sched_trigger._wire import MAX_EVENT_LINE, encode_event

QUEUED = b'{"event":"queued","ok":false}\n'
STARTED = b'{"event":"started","ok":false}\n'
DONE = b'{"event":"done","reason":"fine","duration_ms":12,"ok":true}\n'

Submit = Callable[..., Event]


def sync_submit(*args: Any, **kwargs: Any) -> Event:
    return submit(*args, **kwargs)


def async_submit(*args: Any, **kwargs: Any) -> Event:
    result: Event = run_async(asubmit(*args, **kwargs))
    return result


def uvloop_submit(*args: Any, **kwargs: Any) -> Event:
    result: Event = run_async(asubmit(*args, **kwargs), loop="uvloop")
    return result


BOTH = pytest.mark.parametrize(
    "call",
    [sync_submit, async_submit, uvloop_submit],
    ids=["submit", "asubmit", "asubmit-uvloop"],
)


def test_dial_timeout_is_five_seconds() -> None:
    """DIAL_TIMEOUT is exported, a timedelta of 5 s as in the Go library."""
    assert 5 == DIAL_TIMEOUT.total_seconds()


@BOTH
def test_relays_queued_and_started_then_returns_done(call: Submit) -> None:
    """The request goes out as one compact line; queued/started reach on_event; done is returned."""
    with socket_dir() as tmp:
        server = RawServer(str(Path(tmp) / "s"), [QUEUED, STARTED, DONE])
        seen: list[Event] = []
        try:
            final = call(server.path, {"repos": ["a<b"]}, seen.append)
        finally:
            server.close()
    assert Event("done", "fine", 12, True) == final
    assert [Event("queued"), Event("started")] == seen
    assert b'{"repos":["a\\u003cb"]}\n' == server.request


@BOTH
def test_unknown_event_kinds_and_blank_lines_are_ignored(call: Submit) -> None:
    """A newer daemon's extra events do not reach on_event nor end the wait."""
    script = [QUEUED, b'{"event":"progress","reason":"50%"}\n', b"\n", DONE]
    with socket_dir() as tmp:
        server = RawServer(str(Path(tmp) / "s"), script)
        seen: list[Event] = []
        try:
            assert DONE.strip() == call(server.path, {}, seen.append).encode().strip()
        finally:
            server.close()
    assert [Event("queued")] == seen


@BOTH
@pytest.mark.parametrize("target", ["missing", "stale", "file"])
def test_unreachable(call: Submit, target: str) -> None:
    """No socket, a stale socket or a plain file: Unreachable, a ConnectionError."""
    with socket_dir() as tmp:
        path = Path(tmp) / "s"
        if target == "stale":
            dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            dead.bind(str(path))
            dead.close()
        elif target == "file":
            path.write_text("")
        with pytest.raises(Unreachable) as caught:
            call(path, {})
    expected = {"missing": errno.ENOENT, "stale": errno.ECONNREFUSED, "file": errno.ENOTSOCK}
    assert expected[target] == caught.value.errno
    assert str(path) == caught.value.filename
    assert isinstance(caught.value, ConnectionError)
    assert isinstance(caught.value, TriggerError)


@BOTH
@pytest.mark.parametrize(
    "script",
    [[QUEUED], [QUEUED, STARTED, b'{"event":"done"'], [b"not json\n"], [b'{"event":5}\n']],
    ids=["hangup", "cut-mid-line", "garbage", "wrong-type"],
)
def test_connection_lost_before_done(call: Submit, script: list[bytes]) -> None:
    """A connection that ends, or carries garbage, before done is ConnectionLost."""
    with socket_dir() as tmp:
        server = RawServer(str(Path(tmp) / "s"), script)
        try:
            with pytest.raises(ConnectionLost) as caught:
                call(server.path, {})
        finally:
            server.close()
    assert isinstance(caught.value, ConnectionError)


@BOTH
def test_timeout_closes_the_connection(call: Submit) -> None:
    """timeout elapses: SubmitTimeout (a TimeoutError), and the daemon sees the client leave."""
    with socket_dir() as tmp:
        server = RawServer(str(Path(tmp) / "s"), [QUEUED], hang_up=False)
        try:
            with pytest.raises(SubmitTimeout) as caught:
                call(server.path, {}, timeout=0.05)
            assert server.client_left.wait(DEADLINE)
        finally:
            server.close()
    assert isinstance(caught.value, TimeoutError)


@BOTH
def test_an_on_event_exception_closes_the_connection_and_propagates(call: Submit) -> None:
    """An exception in on_event propagates; the daemon sees the disconnect."""

    def on_event(event: Event) -> None:
        raise LookupError("stop here")

    with socket_dir() as tmp:
        server = RawServer(str(Path(tmp) / "s"), [QUEUED], hang_up=False)
        try:
            with pytest.raises(LookupError, match="stop here"):
                call(server.path, {}, on_event)
            assert server.client_left.wait(DEADLINE)
        finally:
            server.close()


def test_a_deadline_that_passes_during_the_connect_is_a_submit_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The timeout running out between the connect and the send is SubmitTimeout, not ValueError."""
    real_connect = _client.connect

    def slow_connect(path: str, deadline: float | None, stop: object = None) -> socket.socket:
        sock = real_connect(path, deadline)
        assert deadline is not None
        while time.monotonic() <= deadline:  # let the deadline pass, nothing more
            # sleep-ok: the fake connect spends the caller's deadline, which is the point
            time.sleep(max(deadline - time.monotonic(), 0) + 0.001)
        return sock

    monkeypatch.setattr(_client, "connect", slow_connect)
    with socket_dir() as tmp:
        server = RawServer(str(Path(tmp) / "s"), [DONE])
        try:
            with pytest.raises(SubmitTimeout):
                submit(server.path, {}, timeout=0.01)
        finally:
            server.close()


@BOTH
def test_bad_payloads_fail_before_connecting(call: Submit) -> None:
    """An unserializable payload or a bad timeout is refused up front."""
    with socket_dir() as tmp:
        with pytest.raises(TypeError):
            call(Path(tmp) / "nowhere", {"x": object()})
        with pytest.raises(ValueError, match="timeout"):
            call(Path(tmp) / "nowhere", {}, timeout=float("nan"))


def full_backlog(path: str) -> tuple[socket.socket, list[socket.socket]]:
    """A listener on *path* whose accept backlog is full, and the connections filling it."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(0)
    fillers: list[socket.socket] = []
    while True:  # fill the backlog until the kernel refuses with EAGAIN
        filler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        filler.setblocking(False)
        try:
            filler.connect(path)
        except BlockingIOError:
            filler.close()
            return listener, fillers
        fillers.append(filler)


def make_room_and_answer(listener: socket.socket, fillers: list[socket.socket]) -> None:
    """Accept the connections filling the backlog, then the next one, and answer it DONE."""
    listener.settimeout(DEADLINE)
    for _ in fillers:
        listener.accept()[0].close()
    conn, _ = listener.accept()
    with conn:
        conn.recv(100)
        conn.sendall(DONE)


def wait_in_kernel(thread_id: list[int], function: str) -> None:
    """Return once the thread whose native id lands in *thread_id* sleeps in the kernel
    *function* (``/proc/self/task/<tid>/wchan``), as a handshake; fail after DEADLINE."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if thread_id:
            wchan = Path(f"/proc/self/task/{thread_id[0]}/wchan")
            if wchan.read_text(encoding="ascii") == function:
                return
        # sleep-ok: polls the kernel's record of where the thread waits; no event exists
        time.sleep(0.001)
    pytest.fail(f"the thread never waited in {function}")


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
@BOTH
def test_a_full_backlog_is_retried_within_the_dial_bound(call: Submit) -> None:
    """While the accept backlog is full the connect is retried, and succeeds once there is
    room. The backlog is drained only once the client is seen waiting after a refused
    attempt, so the retry is always exercised: `submit` waits in the kernel for room
    (``unix_wait_for_peer``); the asyncio clients sleep in their loop's poll between
    attempts (``do_epoll_wait``), which they reach only after the first refusal."""
    waits_in = "unix_wait_for_peer" if call is sync_submit else "do_epoll_wait"
    with socket_dir() as tmp:
        path = str(Path(tmp) / "s")
        listener, fillers = full_backlog(path)
        try:
            thread_id: list[int] = []

            def client() -> Event:
                thread_id.append(threading.get_native_id())
                return call(path, {})

            thread, box = in_thread(client)
            wait_in_kernel(thread_id, waits_in)
            make_room_and_answer(listener, fillers)
            thread.join(DEADLINE)
        finally:
            for filler in fillers:
                filler.close()
            listener.close()
    assert [Event("done", "fine", 12, True)] == box


def _waits_for_backlog_room(thread_id: int) -> bool:
    """Whether the thread sleeps in the kernel waiting for room in a unix accept backlog."""
    wchan = Path(f"/proc/self/task/{thread_id}/wchan")
    return wchan.read_text() == "unix_wait_for_peer"


def _poll(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            return False
        # sleep-ok: polls the kernel's record of where a thread sleeps; nothing signals it
        time.sleep(0.001)
    return True


@pytest.mark.skipif(sys.platform != "linux", reason="the connect waits in the kernel on Linux")
def test_a_signal_during_a_connect_waiting_for_the_backlog_is_not_a_connection() -> None:
    """A signal handled while the connect waits in the kernel for room in a full backlog
    makes Python report the connect done on a socket that is not connected (PEP 475
    waits for writability, which an unconnected unix socket has at once): submit keeps
    waiting and gets its result instead of failing on a phantom connection."""
    handled = threading.Semaphore(0)
    main = threading.get_ident()
    main_task = threading.get_native_id()
    finished = threading.Event()
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: handled.release())
    with socket_dir() as tmp:
        path = str(Path(tmp) / "s")
        listener, fillers = full_backlog(path)
        try:

            def interrupt_then_serve() -> None:
                # Interrupt the connect while it waits in the kernel (the handler
                # runs on the main thread, inside submit) ...
                assert _poll(lambda: _waits_for_backlog_room(main_task))
                signal.pthread_kill(main, signal.SIGUSR1)
                assert handled.acquire(timeout=DEADLINE)
                # ... and make room once it waits again (a phantom connection ends
                # submit instead).
                assert _poll(lambda: finished.is_set() or _waits_for_backlog_room(main_task))
                if finished.is_set():
                    return
                make_room_and_answer(listener, fillers)

            thread, box = in_thread(interrupt_then_serve)
            try:
                final = submit(path, {})
            finally:
                finished.set()
                thread.join(DEADLINE)
        finally:
            signal.signal(signal.SIGUSR1, previous)
            for filler in fillers:
                filler.close()
            listener.close()
    assert [None] == box
    assert Event("done", "fine", 12, True) == final


def test_a_backlog_full_for_the_whole_dial_bound_is_unreachable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the dial bound (shortened here), a full backlog is Unreachable (ETIMEDOUT)."""
    monkeypatch.setattr(_client, "_DIAL_SECONDS", 0.05)
    with socket_dir() as tmp:
        path = str(Path(tmp) / "s")
        listener, fillers = full_backlog(path)
        try:
            with pytest.raises(Unreachable) as caught:
                submit(path, {})
        finally:
            for filler in fillers:
                filler.close()
            listener.close()
    assert errno.ETIMEDOUT == caught.value.errno


def test_send_failure_is_send_failed() -> None:
    """A daemon that hangs up before reading the request, without answering: SendFailed."""
    with socket_dir() as tmp:
        path = str(Path(tmp) / "s")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(1)
        try:

            def accept_and_drop() -> None:
                conn, _ = listener.accept()
                conn.close()

            thread, _ = in_thread(accept_and_drop)
            with pytest.raises(SendFailed) as caught:
                submit(path, {"blob": "x" * (8 * 1024 * 1024)})
            thread.join(DEADLINE)
        finally:
            listener.close()
    assert isinstance(caught.value, ConnectionError)


def test_asubmit_cancellation_closes_the_connection() -> None:
    """Cancelling the asubmit task closes the connection; the daemon sees it."""
    with socket_dir() as tmp:
        server = RawServer(str(Path(tmp) / "s"), [QUEUED], hang_up=False)
        queued = asyncio.Event

        async def scenario() -> None:
            got_queued = queued()
            task = asyncio.create_task(asubmit(server.path, {}, lambda e: got_queued.set()))
            await asyncio.wait_for(got_queued.wait(), DEADLINE)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        try:
            run_async(scenario())
            assert server.client_left.wait(DEADLINE)
        finally:
            server.close()


@BOTH
def test_a_deeply_nested_event_line_is_a_protocol_error(call: Submit) -> None:
    """A line nested past the parser's depth is the package's protocol error, never a
    RecursionError escaping to the caller."""
    with socket_dir() as tmp:
        server = RawServer(str(Path(tmp) / "s"), [QUEUED, b"[" * 60_000 + b"\n"])
        try:
            with pytest.raises(ConnectionLost) as caught:
                call(server.path, {})
            assert errno.EPROTO == caught.value.errno
            assert "malformed event line" in str(caught.value)
        finally:
            server.close()


@BOTH
def test_an_endless_event_line_is_connection_lost(call: Submit) -> None:
    """A daemon streaming a line without end cannot exhaust the client's memory."""
    with socket_dir() as tmp:
        server = RawServer(str(Path(tmp) / "s"), [b"x" * (2 * 1024 * 1024)])
        try:
            with pytest.raises(ConnectionLost) as caught:
                call(server.path, {})
        finally:
            server.close()
    assert errno.EPROTO == caught.value.errno


def _largest_done(duration_ms: int) -> Event:
    """A failed ``done`` whose line is exactly MAX_EVENT_LINE bytes, its reason made of the
    characters Go's escaping grows most (``<`` becomes six bytes)."""
    room = MAX_EVENT_LINE - (len(encode_event("done", False, "x", duration_ms)) - 1)
    reason = "<" * (room // 6) + "x" * (room % 6)
    event = Event("done", reason, duration_ms, False)
    assert MAX_EVENT_LINE == len(event.encode())
    return event


@BOTH
def test_the_largest_event_line_a_daemon_sends_is_read(call: Submit) -> None:
    """A real daemon whose run failed with the longest reason it sends whole: the client
    returns that result (the line is exactly the cap, the newline included)."""
    largest = _largest_done(1500)

    def run(stop: threading.Event, trigger: str, payload: object) -> Outcome:
        return Outcome(False, largest.reason, 1.5)

    with socket_dir() as tmp:
        path = str(Path(tmp) / "d.sock")
        with run_broker_in_thread(path, run):
            final = call(path, {})
    assert largest == final


@BOTH
def test_a_line_one_byte_over_the_cap_is_a_protocol_error(call: Submit) -> None:
    """A hand-written daemon that sends a ``done`` line one byte longer than any daemon
    writes gets a clear protocol error (ConnectionLost, EPROTO, naming the cap) from both
    twins alike, after the lines before it were relayed."""
    largest = _largest_done(7)
    over = Event("done", largest.reason + "x", 7, False).encode()
    assert MAX_EVENT_LINE + 1 == len(over)
    with socket_dir() as tmp:
        server = RawServer(str(Path(tmp) / "s"), [QUEUED, over])
        seen: list[Event] = []
        try:
            with pytest.raises(ConnectionLost) as caught:
                call(server.path, {}, seen.append)
        finally:
            server.close()
    assert [Event("queued")] == seen
    assert errno.EPROTO == caught.value.errno
    assert "daemon sent an event line over 65,536 bytes" in str(caught.value)


@BOTH
def test_a_reason_over_a_mebibyte_still_delivers_the_result(call: Submit) -> None:
    """A run that fails with a 2 MiB reason: the daemon cuts the reason to fit its line cap
    and says so, and the client gets the run's result (both clients used to lose it)."""
    reason = "boom " * (400 * 1024)

    def run(stop: threading.Event, trigger: str, payload: object) -> Outcome:
        return Outcome(False, reason, 2.0)

    with socket_dir() as tmp:
        path = str(Path(tmp) / "d.sock")
        with run_broker_in_thread(path, run):
            final = call(path, {})
    assert (False, 2000) == (final.ok, final.duration_ms)
    assert final.reason.endswith(f" [reason truncated: {len(reason)} bytes]")
    assert reason.startswith(final.reason.split(" [reason truncated")[0])
    assert MAX_EVENT_LINE >= len(final.encode())


def test_the_clients_line_cap_is_the_servers() -> None:
    """The clients accept exactly the lines a daemon may send."""
    assert 64 * 1024 == MAX_EVENT_LINE == LINE_LIMIT


@BOTH
def test_a_file_that_is_not_a_socket_is_named_as_such(call: Submit) -> None:
    """A regular file at the path reads 'not a socket', not 'Connection refused'."""
    with socket_dir() as tmp:
        path = Path(tmp) / "s"
        path.write_text("")
        with pytest.raises(Unreachable, match="not a socket"):
            call(path, {})


@BOTH
def test_a_path_over_the_sun_path_limit_is_named_as_such(call: Submit) -> None:
    """A path longer than a unix socket takes says so, instead of '[Errno None]'."""
    path = "/tmp/" + "x" * 120
    with pytest.raises(Unreachable, match=r"over the 10[37]-byte limit") as caught:
        call(path, {})
    assert errno.ENAMETOOLONG == caught.value.errno


def test_setting_stop_ends_the_wait_at_once() -> None:
    """submit(stop=event) raises SubmitCancelled as soon as the event is set, and the daemon
    sees the client leave (as Go's Submit does when its context is cancelled)."""
    stop = threading.Event()
    with socket_dir() as tmp:
        server = RawServer(str(Path(tmp) / "s"), [QUEUED], hang_up=False)
        try:
            queued = threading.Event()
            thread, box = in_thread(
                lambda: submit(server.path, {}, lambda e: queued.set(), stop=stop)
            )
            assert queued.wait(DEADLINE)
            stop.set()
            thread.join(DEADLINE)
            assert not thread.is_alive()
            assert server.client_left.wait(DEADLINE)
        finally:
            server.close()
    assert 1 == len(box)
    assert isinstance(box[0], SubmitCancelled)
    assert isinstance(box[0], TriggerError)


def test_a_stop_already_set_submits_nothing() -> None:
    """With the event already set, submit raises at once without connecting."""
    stop = threading.Event()
    stop.set()
    with pytest.raises(SubmitCancelled):
        submit("/nonexistent/daemon.sock", {}, stop=stop)


def test_stop_and_timeout_together_whichever_comes_first() -> None:
    """The timeout still bounds a wait that also listens for stop."""
    with socket_dir() as tmp:
        server = RawServer(str(Path(tmp) / "s"), [QUEUED], hang_up=False)
        try:
            with pytest.raises(SubmitTimeout):
                submit(server.path, {}, stop=threading.Event(), timeout=0.05)
            assert server.client_left.wait(DEADLINE)
        finally:
            server.close()


# --- the twins agree, and nothing escapes as a bare Python error ------------------------


@BOTH
def test_an_oversized_request_gets_the_daemons_own_answer(call: Submit) -> None:
    """A request over the daemon's size cap is answered ``undecodable request`` by the daemon,
    and both twins return that answer (asubmit reported SendFailed: the twins must agree)."""
    runs: list[object] = []

    def run(stop: threading.Event, trigger: str, payload: object) -> Outcome:
        runs.append(payload)
        return Outcome(True)

    with socket_dir() as tmp:
        path = str(Path(tmp) / "d.sock")
        with run_broker_in_thread(path, run):
            final = call(path, {"blob": "x" * (9 * 1024 * 1024)})
    assert Event("done", "undecodable request", 0, False) == final
    assert [] == runs


def _nested(depth: int) -> object:
    value: object = []
    for _ in range(depth - 1):
        value = [value]
    return value


@BOTH
def test_a_payload_nested_too_deeply_to_encode_is_a_value_error(call: Submit) -> None:
    """A payload nested deeper than Python's json encodes (5,000 levels broke 3.11 and
    3.12; 20,000 is past every version) is a ValueError naming the problem, raised before
    connecting (it was a bare RecursionError)."""
    with socket_dir() as tmp, pytest.raises(ValueError, match="nests too deeply") as caught:
        call(Path(tmp) / "nowhere", _nested(20_000))
    assert not isinstance(caught.value, RecursionError)


# --- whose socket is it ----------------------------------------------------------------


@BOTH
def test_a_socket_of_another_user_gets_nothing(call: Submit) -> None:
    """A socket served by another user (planted by ``nobody``) is refused before anything is
    sent: Unreachable (EPERM) naming its uid, and the listener receives not one byte."""
    nobody = pwd.getpwnam("nobody").pw_uid
    with socket_dir() as tmp, foreign_server(tmp) as (path, child):
        with pytest.raises(Unreachable) as caught:
            call(path, {"token": "s3cr3t"})
        assert b"" == received(child)
    assert errno.EPERM == caught.value.errno
    assert f"uid {nobody}" in str(caught.value)
    assert path == caught.value.filename


@BOTH
def test_owner_trusts_a_deliberately_cross_user_daemon(call: Submit) -> None:
    """``owner=`` names the daemon's uid for a deliberate cross-user setup: the request goes."""
    nobody = pwd.getpwnam("nobody").pw_uid
    with socket_dir() as tmp, foreign_server(tmp) as (path, child):
        final = call(path, {"n": 1}, owner=nobody)
        assert b'{"n":1}\n' == received(child)
    assert Event("done", "served by another user", 0, True) == final


# --- the event-line reader both clients share, as a protocol ----------------------------

_events = st.builds(
    Event,
    st.sampled_from(["queued", "started", "progress", "done"]),
    wire_text.filter(lambda text: len(text) < 200),
    st.integers(0, 2**53),
    st.booleans(),
)


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    """*data* split at *cuts*, with no empty chunk (an empty chunk means end of file)."""
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


@given(
    before=st.lists(_events.filter(lambda e: e.kind != "done"), max_size=6),
    final=_events.filter(lambda e: e.kind == "done"),
    blank=st.sampled_from([b"", b"\n", b" \n"]),
    after=st.binary(max_size=50),
    cuts=st.lists(st.integers(0, 10_000), max_size=12),
)
def test_event_lines_read_the_same_however_the_bytes_are_split(
    before: list[Event], final: Event, blank: bytes, after: bytes, cuts: list[int]
) -> None:
    """Whatever chunks the daemon's bytes arrive in, the reader relays the same queued and
    started events, returns the first done, and ignores blank lines and what follows done."""
    stream = b"".join(blank + e.encode() for e in before) + final.encode() + after
    seen: list[Event] = []
    lines = _client.EventLines("/d.sock", seen.append)
    done = None
    for chunk in _chunks(stream, cuts):  # as the clients read: until done arrives
        done = lines.feed(chunk)
        if done is not None:
            break
    assert Event.decode(final.encode()) == done
    relayed = [Event.decode(e.encode()) for e in before if e.kind in ("queued", "started")]
    assert relayed == seen


@given(extra=st.integers(0, 3), cuts=st.lists(st.integers(0, 200_000), max_size=8))
def test_event_lines_refuse_a_line_past_the_cap_however_split(extra: int, cuts: list[int]) -> None:
    """A line one or more bytes past the cap is ConnectionLost (EPROTO), whether it arrives
    whole, in pieces, or without its newline; the end of the stream before done is
    ConnectionLost (ECONNRESET)."""
    stream = b"x" * (LINE_LIMIT + extra) + (b"\n" if extra % 2 else b"")
    lines = _client.EventLines("/d.sock", None)

    def feed_all() -> None:
        for chunk in _chunks(stream, cuts):
            lines.feed(chunk)

    with pytest.raises(ConnectionLost) as caught:
        feed_all()
    assert errno.EPROTO == caught.value.errno
    with pytest.raises(ConnectionLost) as ended:
        _client.EventLines("/d.sock", None).feed(b"")
    assert errno.ECONNRESET == ended.value.errno


@contextlib.contextmanager
def no_free_descriptors() -> Iterator[None]:
    """Lower this process's descriptor limit to its lowest free descriptor: the next open,
    socket or pipe fails with EMFILE, as in a process that ran out of them."""
    probe = os.open(os.devnull, os.O_RDONLY)  # the lowest free number
    os.close(probe)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (probe, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_process_out_of_descriptors_is_unreachable_for_both_twins() -> None:
    """A client that cannot get a socket (EMFILE) raises Unreachable, from submit and from
    asubmit alike, not a bare OSError."""
    with socket_dir() as tmp:
        path = str(Path(tmp) / "d.sock")
        with no_free_descriptors(), pytest.raises(Unreachable) as sync:
            submit(path, {})

        async def scenario() -> None:
            with no_free_descriptors():
                await asubmit(path, {})

        with pytest.raises(Unreachable) as async_:
            run_async(scenario())
    assert errno.EMFILE == sync.value.errno == async_.value.errno
    assert path == sync.value.filename == async_.value.filename
