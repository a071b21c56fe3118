"""stop_on_signals and astop_on_signals: real signals, in-process and in child processes.

In-process tests deliver one signal with ``signal.raise_signal`` while the
helper is installed, so the runner itself is never at risk. Every test that
lets a signal take its default action (the second signal) runs in a child
that prints ``ready`` once its handlers are installed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest
from sched_loop_testkit import DEADLINE, child
from sched_testing import open_fds

from sched_loop import LoopConfigError, astop_on_signals, stop_on_signals

needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc")


def sentinel_handler(signum: int, frame: FrameType | None) -> None:
    """A recognisable previous handler; never expected to run."""
    raise AssertionError(f"the previous handler ran for signal {signum}")


@pytest.fixture
def previous_handlers() -> Iterator[None]:
    """Install sentinel_handler for SIGTERM and SIGINT around a test, then restore."""
    saved = {s: signal.signal(s, sentinel_handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


@pytest.mark.usefixtures("previous_handlers")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_first_signal_sets_the_event_and_handlers_are_restored(sig: signal.Signals) -> None:
    """One SIGTERM or SIGINT sets the event; on exit the previous handlers are back."""
    with stop_on_signals() as stop:
        assert not stop.is_set()
        signal.raise_signal(sig)
        assert stop.wait(DEADLINE)
    assert sentinel_handler is signal.getsignal(signal.SIGTERM)
    assert sentinel_handler is signal.getsignal(signal.SIGINT)


@needs_proc
def test_previous_wakeup_fd_is_restored_and_no_descriptor_leaks() -> None:
    """The wakeup fd in place before is back after exit; no fd and no thread is left over."""
    before_fds = open_fds()
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    before_threads = set(threading.enumerate())
    old = signal.set_wakeup_fd(wfd)
    try:
        with stop_on_signals() as stop:
            signal.raise_signal(signal.SIGTERM)
            assert stop.wait(DEADLINE)
        assert wfd == signal.set_wakeup_fd(old)
    finally:
        signal.set_wakeup_fd(old)
        os.close(rfd)
        os.close(wfd)
    assert before_fds == open_fds()
    assert before_threads == set(threading.enumerate())


@pytest.mark.usefixtures("previous_handlers")
def test_handlers_are_restored_when_the_body_raises() -> None:
    """An exception leaving the block still restores the handlers, and propagates."""
    with pytest.raises(KeyError), stop_on_signals():
        raise KeyError("body failed")
    assert sentinel_handler is signal.getsignal(signal.SIGTERM)


def test_other_signals_do_not_set_the_event() -> None:
    """A signal outside the list runs its own handler and leaves the event unset."""
    got: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
    try:
        with stop_on_signals([signal.SIGUSR2]) as stop:
            signal.raise_signal(signal.SIGUSR1)
        # Exiting joined the helper after it read every byte written before.
        assert not stop.is_set()
        assert [signal.SIGUSR1] == got
    finally:
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.usefixtures("previous_handlers")
def test_uncatchable_signal_fails_and_rolls_back() -> None:
    """SIGKILL cannot be caught: OSError, and the SIGTERM handler already set is undone."""
    with (
        pytest.raises(OSError, match="Invalid argument"),
        stop_on_signals([signal.SIGTERM, signal.SIGKILL]),
    ):
        pass
    assert sentinel_handler is signal.getsignal(signal.SIGTERM)


@pytest.mark.usefixtures("previous_handlers")
def test_async_uncatchable_signal_fails_and_rolls_back() -> None:
    """astop_on_signals with SIGKILL: RuntimeError, and the SIGTERM handler set is undone."""

    async def main() -> None:
        with pytest.raises(RuntimeError):
            async with astop_on_signals([signal.SIGTERM, signal.SIGKILL]):
                pass

    asyncio.run(main(), debug=True)
    assert sentinel_handler is signal.getsignal(signal.SIGTERM)


@needs_proc
def test_helper_thread_never_receives_the_signals() -> None:
    """The helper blocks the handled signals, so the kernel delivers them to the main thread."""
    with stop_on_signals([signal.SIGUSR2]):
        helper = next(t for t in threading.enumerate() if t.name == "sched_loop-signals")
        assert helper.native_id is not None
        status = Path(f"/proc/self/task/{helper.native_id}/status").read_text()
    blocked = int(next(x for x in status.splitlines() if x.startswith("SigBlk:")).split()[1], 16)
    assert blocked & (1 << (signal.SIGUSR2 - 1))


@pytest.mark.parametrize("signals", [[], [0], [100_000]])
def test_bad_signal_lists_are_config_errors(signals: list[int]) -> None:
    """An empty list or an unknown signal number is a LoopConfigError (a ValueError)."""
    with pytest.raises(LoopConfigError), stop_on_signals(signals):
        pass


def test_entering_outside_the_main_thread_is_a_config_error() -> None:
    """Handlers can only be installed from the main thread; elsewhere a clear error."""
    errors: list[BaseException] = []

    def enter() -> None:
        try:
            with stop_on_signals():
                pass
        except LoopConfigError as exc:
            errors.append(exc)

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join(DEADLINE)
    assert 1 == len(errors)
    assert "main thread" in str(errors[0])


@pytest.mark.usefixtures("previous_handlers")
def test_async_first_signal_sets_the_event_and_handlers_are_restored() -> None:
    """astop_on_signals: one SIGTERM sets the asyncio.Event; the previous handlers come back."""

    async def main() -> bool:
        async with astop_on_signals() as stop:
            signal.raise_signal(signal.SIGTERM)
            await asyncio.wait_for(stop.wait(), DEADLINE)
            return stop.is_set()

    assert asyncio.run(main(), debug=True)
    assert sentinel_handler is signal.getsignal(signal.SIGTERM)
    assert sentinel_handler is signal.getsignal(signal.SIGINT)


# --- child processes: default actions and the main-thread wait ---------------

SECOND_SIGNAL_CHILD = """
    import threading
    from sched_loop import stop_on_signals
    with stop_on_signals() as stop:
        print("ready")
        stop.wait()
        print("draining")
        threading.Event().wait()  # a drain that would never end by itself
"""


#: A first signal, then a second one: the same, or the other.
SIGNAL_PAIRS = [
    (signal.SIGINT, signal.SIGINT),
    (signal.SIGTERM, signal.SIGTERM),
    (signal.SIGTERM, signal.SIGINT),
]


@pytest.mark.parametrize(("first", "second"), SIGNAL_PAIRS)
def test_second_signal_takes_the_default_action(
    first: signal.Signals, second: signal.Signals
) -> None:
    """The first signal starts the drain; the second kills the process by that signal."""
    with child(SECOND_SIGNAL_CHILD) as proc:
        proc.expect("ready")
        proc.kill(first)
        proc.expect("draining")
        proc.kill(second)
        assert -second == proc.wait()


ASYNC_SECOND_SIGNAL_CHILD = """
    import asyncio
    from sched_loop import astop_on_signals
    async def main():
        async with astop_on_signals() as stop:
            print("ready")
            await stop.wait()
            print("draining")
            await asyncio.Event().wait()
    asyncio.run(main())
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_async_second_signal_takes_the_default_action(sig: signal.Signals) -> None:
    """astop_on_signals: a second signal kills the process by that signal."""
    with child(ASYNC_SECOND_SIGNAL_CHILD) as proc:
        proc.expect("ready")
        proc.kill(sig)
        proc.expect("draining")
        proc.kill(sig)
        assert -sig == proc.wait()


CATCHING_CHILD = """
    from sched_loop import stop_on_signals
    with stop_on_signals(second_signal="catch") as stop:
        print("ready")
        stop.wait()
        print("draining")
        # The drain: it waits for the parent's go-ahead, which comes after the
        # second signal, and must not be cut short by that signal.
        input()
        print("drained")
    print("closed")
"""


@pytest.mark.parametrize(("first", "second"), SIGNAL_PAIRS)
def test_second_signal_catch_keeps_catching_until_the_helper_is_closed(
    first: signal.Signals, second: signal.Signals
) -> None:
    """second_signal="catch": later signals are caught (Go's NotifyContext), the drain ends."""
    with child(CATCHING_CHILD) as proc:
        proc.expect("ready")
        proc.kill(first)
        proc.expect("draining")
        proc.kill(second)
        proc.kill(second)
        # The signals are pending in the child before the go-ahead is written,
        # so its read is interrupted and the handler runs first: the child
        # lives to read the go-ahead only if the handler did not kill it.
        proc.send("go")
        proc.expect("drained")
        proc.expect("closed")
        assert 0 == proc.wait()


ASYNC_CATCHING_CHILD = """
    import asyncio, sys
    from sched_loop import astop_on_signals
    async def main():
        async with astop_on_signals(second_signal="catch") as stop:
            print("ready")
            await stop.wait()
            print("draining")
            await asyncio.to_thread(sys.stdin.readline)
            print("drained")
        print("closed")
    asyncio.run(main())
"""


def test_async_second_signal_catch_keeps_catching_until_the_helper_is_closed() -> None:
    """astop_on_signals(second_signal="catch"): a second SIGTERM does not end the drain."""
    with child(ASYNC_CATCHING_CHILD) as proc:
        proc.expect("ready")
        proc.kill(signal.SIGTERM)
        proc.expect("draining")
        proc.kill(signal.SIGTERM)
        proc.send("go")
        proc.expect("drained")
        proc.expect("closed")
        assert 0 == proc.wait()


@pytest.mark.parametrize("policy", ["force", "catch"])
@pytest.mark.usefixtures("previous_handlers")
def test_either_policy_restores_the_previous_handlers(policy: str) -> None:
    """Whatever the policy, leaving the block puts the previous handlers back."""
    with stop_on_signals(second_signal=policy) as stop:  # type: ignore[arg-type]
        signal.raise_signal(signal.SIGTERM)
        assert stop.wait(DEADLINE)
    assert sentinel_handler is signal.getsignal(signal.SIGTERM)


@pytest.mark.parametrize("policy", ["", "kill", "Force", None])
def test_an_unknown_second_signal_policy_is_a_config_error(policy: object) -> None:
    """second_signal is "force" or "catch"; anything else is a LoopConfigError."""
    with (
        pytest.raises(LoopConfigError, match="second_signal"),
        stop_on_signals(
            second_signal=policy  # type: ignore[arg-type]
        ),
    ):
        pass

    async def main() -> None:
        with pytest.raises(LoopConfigError, match="second_signal"):
            async with astop_on_signals(second_signal=policy):  # type: ignore[arg-type]
                pass

    asyncio.run(main(), debug=True)


DRAIN_CHILD = """
    from sched_loop import run_loop, stop_on_signals
    runs = 0
    def job(stop):
        global runs
        runs += 1
        print(f"run {runs}")
        stop.wait()  # the job notices the stop signal; the loop does not interrupt it
        print(f"run {runs} finishing after stop")
    with stop_on_signals() as stop:
        run_loop(job, 0.001, fire_on_start=True, stop=stop)
    print("drained")
"""


def test_sigterm_drains_the_loop_in_a_child() -> None:
    """SIGTERM during a run: the run finishes, no new run starts, the process exits 0."""
    with child(DRAIN_CHILD) as proc:
        proc.expect("run 1")
        proc.kill(signal.SIGTERM)
        proc.expect("run 1 finishing after stop")
        proc.expect("drained")
        assert 0 == proc.wait()
        assert "" == proc.rest()


NO_DEADLOCK_CHILD = """
    from sched_loop import stop_on_signals
    for i in range({rounds}):
        with stop_on_signals() as stop:
            print("ready", flush=True)
            {wait}
            print("stopped", flush=True)
"""


@pytest.mark.parametrize(
    "wait",
    [
        "stop.wait()",  # one blocking wait in the main thread
        "while not stop.wait(0.0001): pass",  # the event's lock taken and released nonstop
        "while not stop.is_set(): stop.wait(0)",
    ],
)
def test_main_thread_waiting_on_the_event_never_deadlocks(wait: str) -> None:
    """A SIGTERM landing while the main thread waits on the event always sets it.

    A handler that called ``Event.set()`` itself could land while the main
    thread holds the event's lock and hang; repeated rounds give it many chances.
    """
    rounds = 40
    with child(NO_DEADLOCK_CHILD.format(rounds=rounds, wait=wait)) as proc:
        for _ in range(rounds):
            proc.expect("ready")
            proc.kill(signal.SIGTERM)
            proc.expect("stopped")
        assert 0 == proc.wait()


INTERRUPTED_CHILD = """
    import signal
    from sched_loop import run_loop
    # Python leaves SIGINT ignored if it started ignored (a runner started in
    # the background by a non-interactive shell): give it Ctrl-C's usual meaning.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    def job(stop):
        print("ran", flush=True)
    run_loop(job, 3600, fire_on_start=True)  # stop=None: until interrupted
"""


def test_without_stop_the_loop_runs_until_interrupted() -> None:
    """stop=None: the loop sleeps until Ctrl-C, which ends it with KeyboardInterrupt."""
    with child(INTERRUPTED_CHILD) as proc:
        proc.expect("ran")
        proc.kill(signal.SIGINT)
        assert -signal.SIGINT == proc.wait()
        assert "KeyboardInterrupt" in proc.stderr_text()


@pytest.mark.slow
def test_signal_storm_against_the_main_thread_wait() -> None:
    """Stress: 500 rounds of SIGTERM against a main thread hammering the event's lock."""
    rounds = 500
    code = NO_DEADLOCK_CHILD.format(rounds=rounds, wait="while not stop.is_set(): stop.wait(0)")
    with child(code) as proc:
        for _ in range(rounds):
            proc.expect("ready")
            proc.kill(signal.SIGTERM)
            proc.expect("stopped")
        assert 0 == proc.wait()
