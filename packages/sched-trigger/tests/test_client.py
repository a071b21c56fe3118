"""The clients, submit and asubmit: errors, relaying, timeouts, clean disconnects."""

from __future__ import annotations

import asyncio
import errno
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sched_trigger_testkit import DEADLINE, RawServer, in_thread, run_async, socket_dir

from sched_trigger import (
    DIAL_TIMEOUT,
    ConnectionLost,
    Event,
    SendFailed,
    SubmitCancelled,
    SubmitTimeout,
    TriggerError,
    Unreachable,
    _client,
    asubmit,
    submit,
)

QUEUED = b'{"event":"queued","ok":false}\n'
STARTED = b'{"event":"started","ok":false}\n'
DONE = b'{"event":"done","reason":"fine","duration_ms":12,"ok":true}\n'

Submit = Callable[..., Event]


def sync_submit(*args: Any, **kwargs: Any) -> Event:
    return submit(*args, **kwargs)


def async_submit(*args: Any, **kwargs: Any) -> Event:
    result: Event = run_async(asubmit(*args, **kwargs))
    return result


BOTH = pytest.mark.parametrize("call", [sync_submit, async_submit], ids=["submit", "asubmit"])


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
def test_a_full_backlog_is_retried_within_the_dial_bound() -> None:
    """While the accept backlog is full the connect is retried, and succeeds once there is
    room: the backlog is drained only once the client waits in the kernel for room, so
    the first attempt is known to have been refused."""
    with socket_dir() as tmp:
        path = str(Path(tmp) / "s")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(0)
        fillers = []
        try:
            while True:  # fill the backlog until the kernel refuses with EAGAIN
                filler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                filler.setblocking(False)
                try:
                    filler.connect(path)
                except BlockingIOError:
                    filler.close()
                    break
                fillers.append(filler)
            thread_id: list[int] = []

            def client() -> Event:
                thread_id.append(threading.get_native_id())
                return submit(path, {})

            thread, box = in_thread(client)
            wait_in_kernel(thread_id, "unix_wait_for_peer")
            listener.settimeout(DEADLINE)
            for _ in fillers:
                listener.accept()[0].close()
            conn, _ = listener.accept()
            with conn:
                conn.recv(100)
                conn.sendall(DONE)
            thread.join(DEADLINE)
        finally:
            for filler in fillers:
                filler.close()
            listener.close()
    assert [Event("done", "fine", 12, True)] == box


def test_a_backlog_full_for_the_whole_dial_bound_is_unreachable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the dial bound (shortened here), a full backlog is Unreachable (ETIMEDOUT)."""
    monkeypatch.setattr(_client, "_DIAL_SECONDS", 0.05)
    with socket_dir() as tmp:
        path = str(Path(tmp) / "s")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(0)
        fillers = []
        try:
            while True:
                filler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                filler.setblocking(False)
                try:
                    filler.connect(path)
                except BlockingIOError:
                    filler.close()
                    break
                fillers.append(filler)
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
        server = RawServer(str(Path(tmp) / "s"), [QUEUED, b"[" * 500_000 + b"\n"])
        try:
            with pytest.raises(ConnectionLost) as caught:
                call(server.path, {})
            assert errno.EPROTO == caught.value.errno
        finally:
            server.close()


@BOTH
def test_an_endless_event_line_is_connection_lost(call: Submit) -> None:
    """A daemon streaming a line without end cannot exhaust the client's memory."""
    with socket_dir() as tmp:
        server = RawServer(str(Path(tmp) / "s"), [b"x" * (2 * 1024 * 1024)])
        try:
            with pytest.raises(ConnectionLost):
                call(server.path, {})
        finally:
            server.close()


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
