"""Every helper thread of every package starts with every signal blocked.

The kernel gives a signal sent to the process (SIGTERM from ``docker stop``,
SIGINT from a terminal) to any one thread that does not block it, and Python
runs the handler in the main thread only: a helper that took it would leave a
main thread blocked in a system call deaf to it. So every thread a package
starts to run its own code goes through the shared ``_stopwatch.start_helper``
(one source in ``tools/copied/``), which blocks them all.

Two checks, for all packages at once: the source never starts a thread any
other way (except the two that run the application's own code, below), and
each helper that can run here really has SIGTERM and SIGINT blocked, read
from ``/proc``. The PostgreSQL backend's monitor and deadline threads are
held to the first check; ``nox -s postgres`` runs them.
"""

from __future__ import annotations

import ast
import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Threads that run the application's code, not the library's: a process that
#: code starts inherits its thread's signal mask, so they keep the caller's.
RUN_APPLICATION_CODE = {
    # The broker's event loop thread runs the application's async jobs.
    ("sched_trigger/_broker.py", "thread"),
    # A sync job's worker thread runs the application's job.
    ("sched_trigger/_execute.py", "thread"),
}


def _thread_starts() -> Iterator[tuple[str, str, int]]:
    """``(module, thread, line)`` for each ``<thread>.start()`` of a ``threading.Thread``."""
    for path in sorted(ROOT.glob("packages/*/src/*/*.py")):
        module = f"{path.parent.name}/{path.name}"
        tree = ast.parse(path.read_text())
        threads = {
            ast.unparse(target)
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func) in ("threading.Thread", "Thread")
            for target in node.targets
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "start"
                and ast.unparse(node.func.value) in threads
            ):
                yield module, ast.unparse(node.func.value), node.lineno


def test_no_package_starts_a_thread_but_through_start_helper() -> None:
    """Every thread the packages create is started by start_helper, but the two that run
    the application's own code."""
    assert {(module, thread) for module, thread, _line in _thread_starts()} == RUN_APPLICATION_CODE


def test_the_check_above_sees_a_bare_start(tmp_path: Path) -> None:
    """The scan finds threads started directly (the PostgreSQL threads were)."""
    source = (
        "import threading\n"
        "class Monitor:\n"
        "    def watch(self):\n"
        "        self._thread = threading.Thread(target=print)\n"
        "        self._thread.start()\n"
    )
    tree = ast.parse(source)
    names = {
        ast.unparse(target)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for target in node.targets
    }
    starts = [
        ast.unparse(node.func.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "start"
    ]
    assert ["self._thread"] == [name for name in starts if name in names]


# --- the helpers themselves, read from /proc -------------------------------------------------

#: Generous upper bound for a helper to appear; never the thing under test.
DEADLINE = 30.0


def _blocked(thread: threading.Thread) -> set[signal.Signals]:
    """Which of SIGTERM and SIGINT *thread* blocks, from ``/proc/self/task/<tid>/status``."""
    assert thread.native_id is not None
    status = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
    mask = int(next(x for x in status.splitlines() if x.startswith("SigBlk:")).split()[1], 16)
    return {sig for sig in (signal.SIGTERM, signal.SIGINT) if mask & (1 << (sig - 1))}


def _inspect(names: set[str], seen: dict[str, set[signal.Signals]]) -> None:
    """Wait until threads of all *names* are alive, then record what each blocks."""
    deadline = time.monotonic() + DEADLINE
    while True:
        alive = {
            t.name: t for t in threading.enumerate() if t.name in names and t.native_id is not None
        }
        if set(alive) == names:
            break
        assert time.monotonic() < deadline, f"helpers never seen: {names - set(alive)}"
        threading.Event().wait(0.001)  # sleep-ok: waits for helpers to appear, bounded
    for name, thread in alive.items():
        seen[name] = _blocked(thread)


def _while_running(names: set[str], seen: dict[str, set[signal.Signals]]) -> tuple[int, int]:
    """A child's stdin that holds it until the helpers *names* were inspected.

    Returns:
        ``(stdin, writer)``: give *stdin* to the child, close it once the run
        returned; *writer* is closed by the inspection, which ends the child.
    """
    stdin, writer = os.pipe()

    def inspect_then_release() -> None:
        try:
            _inspect(names, seen)
        finally:
            os.close(writer)

    threading.Thread(target=inspect_then_release, daemon=True).start()
    return stdin, writer


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_every_helper_thread_blocks_sigterm_and_sigint(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each package's helpers, caught alive: sched-cmd's stop watcher, child waiter and
    arun thread, sched-trigger's stop watcher, sched-loop's signal thread."""
    import sched_cmd
    from sched_cmd import _child
    from sched_loop import stop_on_signals
    from sched_trigger import Queue

    seen: dict[str, set[signal.Signals]] = {}
    monkeypatch.setattr(_child, "_HAVE_PIDFD", False)  # a child waiter thread as well

    stdin, _ = _while_running({"sched_cmd stop watcher", "sched_cmd child waiter"}, seen)
    try:
        sched_cmd.run(["cat"], stdin=stdin, stop=threading.Event())
    finally:
        os.close(stdin)
    stdin, _ = _while_running({"sched_cmd arun"}, seen)
    try:
        asyncio.run(sched_cmd.arun(["cat"], stdin=stdin), debug=True)
    finally:
        os.close(stdin)

    queue: Queue[object] = Queue(1)
    stop = threading.Event()

    def inspect_then_stop() -> None:
        try:
            _inspect({"sched_trigger stop watcher"}, seen)
        finally:
            stop.set()

    inspector = threading.Thread(target=inspect_then_stop, daemon=True)
    inspector.start()
    assert queue.get(stop=stop) is None
    inspector.join(DEADLINE)

    with stop_on_signals():
        _inspect({"sched_loop-signals"}, seen)

    both = {signal.SIGTERM, signal.SIGINT}
    assert {
        "sched_cmd stop watcher": both,
        "sched_cmd child waiter": both,
        "sched_cmd arun": both,
        "sched_trigger stop watcher": both,
        "sched_loop-signals": both,
    } == seen
