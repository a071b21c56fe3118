"""Stress and property suites (marked slow): many runs at once, random scenarios."""

from __future__ import annotations

import signal
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sched_cmd_testkit import (
    DEADLINE,
    READY,
    SLEEP,
    TERM_EXITS,
    TERM_IGNORED,
    Report,
    alive,
    child,
    open_fds,
    report,
)

from sched_cmd import run

pytestmark = pytest.mark.slow


def _output(size: int) -> str:
    return f'sys.stdout.buffer.write(b"o" * {size}); sys.stderr.buffer.write(b"e" * {size})\n'


@settings(max_examples=40)
@given(
    ignores_term=st.booleans(),
    stopped=st.booleans(),
    kill_group=st.booleans(),
    output_size=st.sampled_from([0, 1, 70_000, 300_000]),
)
def test_any_scenario_reaps_the_child_and_keeps_the_output(
    ignores_term: bool, stopped: bool, kill_group: bool, output_size: int
) -> None:
    """Whatever the child does with SIGTERM, the returncode says it, output is whole, no stray."""
    behaviour = TERM_IGNORED if ignores_term else TERM_EXITS
    ending = SLEEP if stopped else ""
    with report() as pipe:
        stop = threading.Event()
        pids: list[int] = []

        def stop_when_ready() -> None:
            pids.append(pipe.ready_pid())
            if stopped:
                stop.set()

        waiter = threading.Thread(target=stop_when_ready, daemon=True)
        waiter.start()
        result = run(
            child(pipe, behaviour, _output(output_size), READY, ending),
            stop=stop,
            grace=0.05,
            kill_group=kill_group,
            capture_output=True,
            pass_fds=[pipe.write_fd],
        )
        waiter.join(DEADLINE)
        lines = pipe.rest()
    if not stopped:
        expected = 0
    elif ignores_term:
        expected = -signal.SIGKILL
    else:
        expected = -signal.SIGTERM
    assert expected == result.returncode
    assert (["got SIGTERM"] if stopped else []) == lines
    assert (b"o" * output_size, b"e" * output_size) == (result.stdout, result.stderr)
    assert not alive(pids[0])


def test_many_concurrent_runs_share_one_stop_and_leak_nothing() -> None:
    """24 runs at once, half ignoring SIGTERM, all in their own groups: all reaped, no fd leak."""
    before = open_fds()
    stop = threading.Event()
    pipes = [Report() for _ in range(24)]
    results: dict[int, int] = {}
    try:

        def one(index: int, pipe: Report) -> None:
            behaviour = TERM_IGNORED if index % 2 else TERM_EXITS
            results[index] = run(
                child(pipe, behaviour, _output(100_000), READY, SLEEP),
                stop=stop,
                grace=0.2,
                kill_group=True,
                capture_output=True,
                pass_fds=[pipe.write_fd],
            ).returncode

        threads = [
            threading.Thread(target=one, args=(index, pipe)) for index, pipe in enumerate(pipes)
        ]
        for thread in threads:
            thread.start()
        pids = [pipe.ready_pid() for pipe in pipes]
        stop.set()
        for thread in threads:
            thread.join(DEADLINE)
        assert [["got SIGTERM"]] * len(pipes) == [pipe.rest() for pipe in pipes]
    finally:
        for pipe in pipes:
            pipe.close()
    expected = {i: -signal.SIGKILL if i % 2 else -signal.SIGTERM for i in range(len(pipes))}
    assert expected == results
    assert [] == [pid for pid in pids if alive(pid)]
    assert before == open_fds()
