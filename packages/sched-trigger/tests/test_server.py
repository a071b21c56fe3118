"""The socket server end to end, on real unix sockets."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from sched_trigger_testkit import (
    DEADLINE,
    Gate,
    Payload,
    daemon,
    exchange,
    ok_run,
    open_fds,
    read_line,
    run_async,
    socket_dir,
)

from sched_trigger import (
    Event,
    Outcome,
    Queue,
    QueueFull,
    Server,
    asubmit,
    listen,
    submit,
)

QUEUED = b'{"event":"queued","ok":false}\n'
STARTED = b'{"event":"started","ok":false}\n'
UNDECODABLE = b'{"event":"done","reason":"undecodable request","ok":false}\n'
FULL = b'{"event":"done","reason":"run queue is full","ok":false}\n'
CLOSED = b'{"event":"done","reason":"scheduler is shutting down","ok":false}\n'
CANCELLED = b'{"event":"done","reason":"cancelled: scheduler shutting down","ok":false}\n'
RELEASED = b'{"event":"done","reason":"released","duration_ms":1,"ok":true}\n'


def test_accepted_request_gets_queued_started_then_one_done() -> None:
    """The exact bytes of an accepted request's exchange; the run sees the decoded payload."""
    seen: list[Any] = []

    async def run(stop: asyncio.Event, trigger: str, payload: Payload) -> Outcome:
        seen.append((trigger, payload))
        return Outcome(True, "a<b", 0.0425)

    async def scenario() -> list[bytes]:
        async with daemon(run, payload_type=Payload) as d:
            return await exchange(d.path, b'{"repos":["x/y"],"extra":1}\n')

    lines = run_async(scenario())
    done = b'{"event":"done","reason":"a\\u003cb","duration_ms":42,"ok":true}\n'
    assert [QUEUED, STARTED, done] == lines
    assert [("external", Payload(["x/y"]))] == seen


def test_request_without_newline_on_an_open_connection() -> None:
    """One complete JSON value is enough: no newline, no half-close needed."""

    async def scenario() -> list[bytes]:
        async with daemon() as d:
            reader, writer = await asyncio.open_unix_connection(d.path)
            try:
                writer.write(b'{"repos": []}')
                return [await read_line(reader) for _ in range(3)]
            finally:
                writer.close()
                await writer.wait_closed()

    assert [QUEUED, STARTED, b'{"event":"done","ok":true}\n'] == run_async(scenario())


@pytest.mark.parametrize(
    "request_bytes",
    [b"garbage\n", b"}{", b'{"repos": [1, 2}\n', b"NaN\n", b"\xff\xfe\n"],
)
def test_garbage_gets_undecodable_done(request_bytes: bytes) -> None:
    """Garbage is answered at once with done, ok false, 'undecodable request'."""

    async def scenario() -> list[bytes]:
        async with daemon() as d:
            return await exchange(d.path, request_bytes)

    assert [UNDECODABLE] == run_async(scenario())


def test_truncated_request_then_eof_is_undecodable() -> None:
    """A half-closed connection with half a value gets undecodable; nothing is queued."""

    async def scenario() -> tuple[list[bytes], int]:
        async with daemon() as d:
            lines = await exchange(d.path, b'{"repos": ["a"', half_close=True)
            return lines, len(d.queue)

    assert ([UNDECODABLE], 0) == run_async(scenario())


def test_payload_type_mismatch_is_undecodable() -> None:
    """A value that does not fit the dataclass is refused like garbage."""

    async def scenario() -> list[bytes]:
        async with daemon(payload_type=Payload) as d:
            return await exchange(d.path, b'{"repos": "not-a-list"}\n')

    assert [UNDECODABLE] == run_async(scenario())


def test_size_cap_just_under_and_over() -> None:
    """A request at the cap is served; one byte over is undecodable."""
    cap = 64 * 1024

    def body(size: int) -> bytes:
        return b'"' + b"x" * (size - 2) + b'"'

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        async with daemon(max_request_size=cap) as d:
            under = await exchange(d.path, body(cap) + b"\n")
            over = await exchange(d.path, body(cap + 1) + b"\n")
            return under, over

    under, over = run_async(scenario())
    assert [QUEUED, STARTED, b'{"event":"done","ok":true}\n'] == under
    assert [UNDECODABLE] == over


def test_slow_request_times_out_as_undecodable() -> None:
    """A client that stalls mid-request is answered once the read bound passes."""

    async def scenario() -> list[bytes]:
        async with daemon(read_timeout=0.05) as d:
            reader, writer = await asyncio.open_unix_connection(d.path)
            try:
                writer.write(b'{"repos": ')
                return [await read_line(reader), await read_line(reader)]
            finally:
                writer.close()
                await writer.wait_closed()

    assert [UNDECODABLE, b""] == run_async(scenario())


@pytest.mark.parametrize("capacity", [0, 1, 3])
def test_capacity_and_rejections(capacity: int) -> None:
    """One running plus *capacity* queued are accepted; the next is rejected by the queue."""
    rejected: list[tuple[Any, Exception]] = []

    async def scenario() -> tuple[list[list[bytes]], list[object]]:
        gate = Gate()
        async with daemon(
            gate, capacity=capacity, on_rejected=lambda p, e: rejected.append((p, e))
        ) as d:
            running = asyncio.create_task(exchange(d.path, b"0\n"))
            assert 0 == await asyncio.wait_for(gate.started.get(), DEADLINE)
            queued = []
            for n in range(1, capacity + 1):
                reader, writer = await asyncio.open_unix_connection(d.path)
                writer.write(f"{n}\n".encode())
                assert QUEUED == await read_line(reader)
                queued.append((reader, writer))
            extra = await exchange(d.path, b'{"n": "extra"}')
            gate.release.set()
            results = [await asyncio.wait_for(running, DEADLINE)]
            for reader, writer in queued:
                results.append([QUEUED, *[await read_line(reader) for _ in range(2)]])
                writer.close()
                await writer.wait_closed()
            results.append(extra)
            return results, gate.payloads

    results, payloads = run_async(scenario())
    assert [[QUEUED, STARTED, RELEASED]] * (capacity + 1) == results[:-1]
    assert [FULL] == results[-1]
    assert list(range(capacity + 1)) == payloads
    assert 1 == len(rejected)
    assert {"n": "extra"} == rejected[0][0]
    assert isinstance(rejected[0][1], QueueFull)


def test_closed_queue_rejects_with_shutting_down() -> None:
    """While the daemon shuts down, a request gets done with 'scheduler is shutting down'."""

    async def scenario() -> list[bytes]:
        async with daemon() as d:
            d.queue.close()
            return await exchange(d.path, b"{}")

    assert [CLOSED] == run_async(scenario())


def test_shutdown_with_jobs_queued_strands_nobody() -> None:
    """Jobs still queued at shutdown each get the cancelled result; the running one its own."""

    async def scenario() -> list[list[bytes]]:
        gate = Gate()
        async with daemon(gate, capacity=4) as d:
            running = asyncio.create_task(exchange(d.path, b"0\n"))
            await asyncio.wait_for(gate.started.get(), DEADLINE)
            waiting = []
            for n in (1, 2, 3):
                reader, writer = await asyncio.open_unix_connection(d.path)
                writer.write(f"{n}\n".encode())
                assert QUEUED == await read_line(reader)
                waiting.append((reader, writer))
            d.server.close()
            d.queue.close()
            d.stop.set()
            gate.release.set()
            results = [await asyncio.wait_for(running, DEADLINE)]
            for reader, writer in waiting:
                results.append([await read_line(reader), await read_line(reader)])
                writer.close()
                await writer.wait_closed()
            return results

    results = run_async(scenario())
    assert [QUEUED, STARTED, RELEASED] == results[0]
    assert [[CANCELLED, b""]] * 3 == results[1:]


def test_clients_that_vanish_while_queued_and_running() -> None:
    """The runs still happen and complete; the server settles; no descriptor leaks."""

    async def scenario() -> tuple[list[object], set[str], set[str]]:
        gate = Gate()
        async with daemon(gate, capacity=2) as d:
            # sleep-ok: one zero-length yield: the daemon's tasks reach their waits
            await asyncio.sleep(0)
            before = open_fds()
            gone = []
            for n in (0, 1):
                reader, writer = await asyncio.open_unix_connection(d.path)
                writer.write(f"{n}\n".encode())
                assert QUEUED == await read_line(reader)
                gone.append(writer)
            await asyncio.wait_for(gate.started.get(), DEADLINE)
            for writer in gone:  # one running, one queued: both clients leave
                writer.close()
                await writer.wait_closed()
            gate.release.set()
            await asyncio.wait_for(gate.started.get(), DEADLINE)  # the queued run still starts
            d.server.close()
            d.queue.close()
            await asyncio.wait_for(d.executor, DEADLINE)
            await asyncio.wait_for(d.server.wait(), DEADLINE)
            after = open_fds()
            return gate.payloads, before, after

    payloads, before, after = run_async(scenario())
    assert [0, 1] == payloads
    assert set() == after - before  # nothing the two connections opened is left open


def test_500_concurrent_clients_each_get_exactly_one_done_in_order() -> None:
    """500 simultaneous clients: each sees queued, started, done, and nothing else."""
    count = 500
    order: list[int] = []

    async def run(stop: asyncio.Event, trigger: str, payload: int) -> Outcome:
        order.append(payload)
        return Outcome(True, f"ran {payload}")

    accepted: list[int] = []

    async def scenario() -> list[list[bytes]]:
        async with daemon(run, capacity=count, on_accepted=accepted.append) as d:
            return list(
                await asyncio.gather(*(exchange(d.path, f"{n}\n".encode()) for n in range(count)))
            )

    results = run_async(scenario())
    for n, lines in enumerate(results):
        done = f'{{"event":"done","reason":"ran {n}","ok":true}}\n'.encode()
        assert [QUEUED, STARTED, done] == lines
    assert list(range(count)) == sorted(order)
    assert accepted == order  # runs happen in arrival (acceptance) order


def test_a_payload_of_several_mib_round_trips_intact() -> None:
    """A payload of about 5 MiB on the wire reaches the run exactly as the client sent it."""
    payload = {"blob": "é☃<&>" * 200_000, "list": list(range(100_000))}
    seen: list[Any] = []

    def run(stop: threading.Event, trigger: str, p: Any) -> Outcome:
        seen.append(p)
        return Outcome(True, f"{len(p['blob'])}")

    async def scenario() -> Event:
        async with daemon(run) as d:
            return await asyncio.to_thread(submit, d.path, payload)

    final = run_async(scenario())
    assert Event("done", str(1_000_000), 0, True) == final
    assert [payload] == seen


@pytest.mark.parametrize(
    "rounds", [pytest.param(10, id="300"), pytest.param(100, id="3000", marks=pytest.mark.slow)]
)
def test_no_descriptor_leaks_after_thousands_of_requests(rounds: int) -> None:
    """Thousands of requests through one daemon leave the descriptor table as it was."""

    async def scenario() -> tuple[set[str], set[str]]:
        async with daemon(ok_run, capacity=64) as d:
            # sleep-ok: one zero-length yield: the daemon's tasks reach their waits
            await asyncio.sleep(0)
            before = open_fds()
            for _ in range(rounds):
                finals = await asyncio.gather(*(asubmit(d.path, {}) for _ in range(30)))
                assert all(f.ok for f in finals)
            # Wait for the last connections to close (no polling): the documented
            # shutdown, whose only descriptor to release is the listening socket.
            d.server.close()
            d.queue.close()
            await asyncio.wait_for(d.executor, DEADLINE)
            await asyncio.wait_for(d.server.wait(), DEADLINE)
            return before, open_fds()

    before, after = run_async(scenario())
    assert set() == after - before
    # The listener and its owner lock; a leak reusing their numbers would show here.
    assert 2 == len(before - after)


def test_default_logs_never_carry_the_payload(caplog: pytest.LogCaptureFixture) -> None:
    """Accepted and rejected requests log fixed lines at info/warning, without the payload."""
    caplog.set_level(logging.INFO, logger="sched_trigger")
    secret = "hunter2-secret"

    async def scenario() -> None:
        async with daemon(capacity=0) as d:
            # sleep-ok: one zero-length yield: the daemon's tasks reach their waits
            await asyncio.sleep(0)
            await exchange(d.path, f'{{"token": "{secret}"}}'.encode())
            d.queue.close()
            await exchange(d.path, f'{{"token": "{secret}"}}'.encode())
            await exchange(d.path, f'{{"token": {secret}}}'.encode())

    run_async(scenario())
    records = [r for r in caplog.records if r.name == "sched_trigger"]
    assert [
        (logging.INFO, "triggered run queued"),
        (logging.WARNING, "trigger request rejected: scheduler is shutting down"),
        (logging.WARNING, "trigger request rejected: undecodable request"),
    ] == [(r.levelno, r.getMessage().split(" (")[0]) for r in records]
    assert "scheduler is shutting down" == records[1].sched_reason  # type: ignore[attr-defined]
    for record in records:
        assert secret not in record.getMessage()
        assert secret not in repr(vars(record))


@dataclasses.dataclass
class _Checked:
    """A payload type whose validation quotes the offending value, as validators do."""

    token: str = ""

    def __post_init__(self) -> None:
        if not self.token.startswith("tok-"):
            raise ValueError(f"bad token {self.token!r}")


@dataclasses.dataclass
class _Typed:
    """A payload type whose validation raises TypeError quoting the value."""

    token: str = ""

    def __post_init__(self) -> None:
        raise TypeError(f"cannot use {self.token}")


def test_decoder_errors_are_logged_without_the_payload(caplog: pytest.LogCaptureFixture) -> None:
    """A decoder (payload_type validation or a decode callable) quoting the payload in its
    error: the client gets undecodable, and the log line carries no part of the payload."""
    caplog.set_level(logging.INFO, logger="sched_trigger")
    secret = "hunter2-secret"

    def decode(value: Any) -> object:
        raise KeyError(f"unknown repo {value['repo']}")

    async def scenario() -> list[list[bytes]]:
        answers = []
        for options in (
            {"payload_type": _Checked},
            {"decode": decode},
            {"payload_type": _Typed},
        ):
            async with daemon(**options) as d:
                request = f'{{"token": "{secret}", "repo": "{secret}"}}'.encode()
                answers.append(await exchange(d.path, request))
        return answers

    assert [[UNDECODABLE]] * 3 == run_async(scenario())
    records = [r for r in caplog.records if r.name == "sched_trigger"]
    assert 3 == len(records)
    for record in records:
        assert secret not in record.getMessage()
        assert secret not in repr(vars(record))


def test_hooks_replace_the_default_lines(caplog: pytest.LogCaptureFixture) -> None:
    """on_accepted and on_rejected receive the payloads; the library logs nothing then."""
    caplog.set_level(logging.INFO, logger="sched_trigger")
    accepted: list[Any] = []
    rejected: list[Any] = []

    async def scenario() -> None:
        async with daemon(
            decode=lambda v: ("decoded", v),
            on_accepted=accepted.append,
            on_rejected=lambda p, e: rejected.append((p, str(e))),
        ) as d:
            await exchange(d.path, b"[1]")
            d.queue.close()
            await exchange(d.path, b"[2]")

    run_async(scenario())
    assert [("decoded", [1])] == accepted
    assert [(("decoded", [2]), "scheduler is shutting down")] == rejected
    assert [] == [r for r in caplog.records if r.name == "sched_trigger"]


_QUEUED_LINE = "triggered run queued"
_UNDECODABLE_LINE = "trigger request rejected: undecodable request"
_CLOSED_LINE = "trigger request rejected: scheduler is shutting down"


@pytest.mark.parametrize(
    ("hooks", "lines"),
    [
        (("on_accepted",), [_UNDECODABLE_LINE, _CLOSED_LINE]),
        (("on_rejected",), [_QUEUED_LINE, _UNDECODABLE_LINE]),
        (("on_accepted", "on_rejected"), [_UNDECODABLE_LINE]),
    ],
)
def test_each_hook_replaces_only_its_own_line(
    hooks: tuple[str, ...], lines: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A hook replaces its own default line and no other; an undecodable request (no
    payload to hand a hook) is logged whatever hooks are set, without the payload."""
    caplog.set_level(logging.INFO, logger="sched_trigger")
    secret = "hunter2-secret"
    seen: list[object] = []
    available: dict[str, Any] = {
        "on_accepted": seen.append,
        "on_rejected": lambda payload, error: seen.append((payload, str(error))),
    }

    async def scenario() -> None:
        async with daemon(**{name: available[name] for name in hooks}) as d:
            await exchange(d.path, f'{{"token": "{secret}"}}'.encode())
            await exchange(d.path, f'{{"token": {secret}}}'.encode())
            d.queue.close()
            await exchange(d.path, f'{{"token": "{secret}"}}'.encode())

    run_async(scenario())
    records = [r for r in caplog.records if r.name == "sched_trigger"]
    assert lines == [r.getMessage().split(" (")[0] for r in records]
    assert len(hooks) == len(seen)
    for record in records:
        assert secret not in record.getMessage()
        assert secret not in repr(vars(record))


def test_the_server_documents_decoding_and_hooks() -> None:
    """The Server's reference says how a request is decoded and how hooks replace the
    default lines, as the issue asked (the behaviour is pinned by the tests above)."""
    doc = " ".join((Server.__doc__ or "").split())
    for phrase in (
        "keys matched ignoring case",
        "fields checked by type",
        "unknown keys ignored",
        "members applied in order as Go fills a struct",
        "one hook at a time",
        "Undecodable requests",
        "logged whatever hooks are set, without the payload",
    ):
        assert phrase in doc


def test_a_failing_decode_callable_is_undecodable() -> None:
    """Any exception from decode makes the request undecodable."""

    def decode(value: object) -> object:
        raise KeyError("nope")

    async def scenario() -> list[bytes]:
        async with daemon(decode=decode) as d:
            return await exchange(d.path, b"{}")

    assert [UNDECODABLE] == run_async(scenario())


def test_a_client_that_never_reads_is_cut_off_by_the_write_bound() -> None:
    """An event write that cannot drain within the write bound aborts the connection."""
    huge = "x" * (16 * 1024 * 1024)

    async def scenario() -> None:
        async with daemon(lambda s, t, p: Outcome(False, huge), write_timeout=0.05) as d:
            reader, writer = await asyncio.open_unix_connection(d.path)
            try:
                writer.write(b"{}")
                assert QUEUED == await read_line(reader)
                d.server.close()
                d.queue.close()
                await asyncio.wait_for(d.executor, DEADLINE)
                await asyncio.wait_for(d.server.wait(), DEADLINE)  # returns: the writer gave up
            finally:
                writer.close()
                await writer.wait_closed()

    run_async(scenario())


def test_server_options_are_checked() -> None:
    """payload_type and decode are exclusive; bounds are validated."""
    queue: Queue[Any] = Queue(1)
    with pytest.raises(ValueError, match="not both"):
        Server(queue, payload_type=Payload, decode=lambda v: v)
    with pytest.raises(ValueError, match="max_request_size"):
        Server(queue, max_request_size=0)
    with pytest.raises(ValueError, match="read_timeout"):
        Server(queue, read_timeout=float("inf"))


def test_serving_twice_and_close_before_serve() -> None:
    """serve() refuses a second socket; a server closed before serving closes the socket it gets."""

    async def scenario(tmp: str) -> None:
        server: Server[Any] = Server(Queue(1))
        server.close()
        sock = listen(Path(tmp, "a.sock"))
        await server.serve(sock)
        assert -1 == sock.fileno()
        assert not Path(tmp, "a.sock").exists()
        with (
            pytest.raises(RuntimeError, match="already serving"),
            listen(Path(tmp, "b.sock")) as other,
        ):
            await server.serve(other)
        await asyncio.wait_for(server.wait(), DEADLINE)

    with socket_dir() as tmp:
        run_async(scenario(tmp))


def test_jobs_finished_from_another_thread_reach_the_client() -> None:
    """A hand-written executor may start and finish jobs on its own thread."""

    async def scenario(tmp: str) -> list[bytes]:
        queue: Queue[Any] = Queue(4)
        server: Server[Any] = Server(queue)
        path = str(Path(tmp) / "t.sock")
        serving = asyncio.create_task(server.serve(listen(path)))

        def work(job: Any) -> None:
            job.start()
            job.finish(Outcome(True, "from a thread", 0.002))

        async def executor() -> None:
            async for job in queue:
                thread = threading.Thread(target=work, args=(job,))
                thread.start()
                await asyncio.to_thread(thread.join)

        running = asyncio.create_task(executor())
        lines = await exchange(path, b"{}")
        server.close()
        queue.close()
        await asyncio.wait_for(running, DEADLINE)
        await asyncio.wait_for(server.wait(), DEADLINE)
        await serving
        return lines

    with socket_dir() as tmp:
        lines = run_async(scenario(tmp))
    done = b'{"event":"done","reason":"from a thread","duration_ms":2,"ok":true}\n'
    assert [QUEUED, STARTED, done] == lines


def test_a_job_started_on_another_thread_before_the_server_listens_still_reports_started() -> None:
    """The worker thread may start a job the instant it is submitted, before the server has
    finished handling the request: the client still sees queued, then started, then done."""
    running = threading.Event()
    release = threading.Event()

    def run(stop: threading.Event, trigger: str, payload: object) -> Outcome:
        running.set()
        assert release.wait(DEADLINE)
        return Outcome(True)

    def on_accepted(payload: object) -> None:
        # Runs between the submit and the rest of the request's handling.
        assert running.wait(DEADLINE)

    async def scenario() -> list[bytes]:
        async with daemon(run, on_accepted=on_accepted) as d:
            reader, writer = await asyncio.open_unix_connection(d.path)
            try:
                writer.write(b"{}\n")
                lines = [await read_line(reader), await read_line(reader)]
                release.set()
                lines.append(await read_line(reader))
                return lines
            finally:
                writer.close()
                await writer.wait_closed()

    assert [QUEUED, STARTED, b'{"event":"done","ok":true}\n'] == run_async(scenario())
