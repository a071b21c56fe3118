"""Helpers shared by the sched-cmd tests: child programs, handshakes, /proc checks, interrupts.

Every signal test follows the same handshake: the child gets the write end of
a pipe (``pass_fds``), installs its handlers, and writes ``ready <pid>`` on it;
the test reads that line before it asks for a stop. Children report the
signals they received on the same pipe (``got SIGTERM``). Deadlines are
generous upper bounds, never the thing under test.
"""

from __future__ import annotations

import contextlib
import dis
import inspect
import os
import select
import signal
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import CodeType, FrameType, FunctionType, ModuleType
from typing import Any, final

import sched_testing

#: Generous upper bound for anything a test waits on in real time.
DEADLINE = 30.0


@final
class Report:
    """A pipe a child writes lines to (``pass_fds=[report.write_fd]``)."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self._buffer = b""

    def line(self) -> str:
        """Return the next line, failing the test past the deadline."""
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self.read_fd], [], [], DEADLINE)
            assert ready, "the child did not report in time"
            chunk = os.read(self.read_fd, 4096)
            assert chunk, f"the report pipe closed; unread: {self._buffer!r}"
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def ready_pid(self) -> int:
        """Read the child's ``ready <pid>`` line and return the pid."""
        word, pid = self.line().split()
        assert word == "ready"
        return int(pid)

    def rest(self) -> list[str]:
        """Return every line still to come, once all writers have closed the pipe."""
        os.close(self.write_fd)
        self.write_fd = -1
        data = self._buffer
        while chunk := os.read(self.read_fd, 4096):
            data += chunk
        self._buffer = b""
        return data.decode().splitlines()

    def close(self) -> None:
        """Close what is still open."""
        for fd in (self.read_fd, self.write_fd):
            if fd >= 0:
                os.close(fd)
        self.read_fd = self.write_fd = -1


@contextlib.contextmanager
def report() -> Iterator[Report]:
    """A `Report` pipe, closed at the end."""
    pipe = Report()
    try:
        yield pipe
    finally:
        pipe.close()


def python(code: str) -> list[str]:
    """The argv of a Python child running *code* (dedented), unbuffered."""
    return [sys.executable, "-u", "-c", textwrap.dedent(code)]


#: Child prelude: ``say(text)`` writes a line on the report pipe (fd in argv[1]).
PRELUDE = """
import os, signal, sys, time
REPORT = int(sys.argv[1])
def say(text):
    os.write(REPORT, (text + "\\n").encode())
"""

# A Python handler cannot be trusted here: a signal landing between the
# interpreter's last check and the start of ``time.sleep``'s system call waits
# for the sleep to end. So the children block SIGTERM before they report
# ready and take it with ``sigwait``, which cannot miss it.

#: Reports ``ready <pid>`` once the handlers before it are installed.
READY = 'say(f"ready {os.getpid()}")\n'

#: Traps SIGTERM, reports it, then dies of it (the default action).
TERM_EXITS = """
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
def on_term(signum):
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    os.kill(os.getpid(), signum)
"""

#: Traps SIGTERM, reports it and carries on (only SIGKILL stops it).
TERM_IGNORED = """
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
def on_term(signum):
    pass
"""

#: Waits for SIGTERM (trapped by TERM_EXITS or TERM_IGNORED), reporting each one.
SLEEP = """
while True:
    signum = signal.sigwait([signal.SIGTERM])
    say("got " + signal.Signals(signum).name)
    on_term(signum)
"""


def child(report: Report, *parts: str) -> list[str]:
    """The argv of a Python child made of the prelude and *parts*, reporting on *report*."""
    code = PRELUDE + "".join(textwrap.dedent(part) for part in parts)
    return [sys.executable, "-u", "-c", code, str(report.write_fd)]


def on_ready(report: Report, action: Callable[[int], None]) -> threading.Thread:
    """Start a thread that reads the child's ready line, then calls *action(pid)*."""
    thread = threading.Thread(target=lambda: action(report.ready_pid()), daemon=True)
    thread.start()
    return thread


def process_state(pid: int) -> str | None:
    """Return the /proc state letter of *pid* (``"Z"`` for a zombie), or None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return None
    return stat[stat.rindex(b")") + 2 :].split()[0].decode()


def alive(pid: int) -> bool:
    """Tell whether *pid* is a running process (not gone, not a zombie)."""
    return process_state(pid) not in (None, "Z", "X")


def kill_quietly(pid: int) -> None:
    """SIGKILL *pid* if it is still running (test cleanup for strays)."""
    if alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# Shared with every suite (testing/sched_testing.py).
open_fds = sched_testing.open_fds


# The interrupt sweep's tracer, as sched-exclusive's tests have it (sched_exclusive_testkit).

#: Calls after which CPython runs pending signal handlers (its "eval breaker"
#: checks): a handler's exception surfaces as a call returns, at a loop's
#: backward jump, or as a function starts or a generator resumes.
_BREAKERS = frozenset({"CALL", "CALL_KW", "CALL_FUNCTION_EX"})


def library_code(*modules: ModuleType) -> frozenset[CodeType]:
    """Every code object (nested ones included) defined in ``modules``.

    A decorated function counts by the function it wraps (``__wrapped__``):
    the generator of a ``contextlib.contextmanager`` is the library's code,
    the wrapper is contextlib's.
    """
    found: set[CodeType] = set()
    functions = [
        inspect.unwrap(value)
        for module in modules
        for value in vars(module).values()
        if isinstance(value, FunctionType)
    ]
    pending = [function.__code__ for function in functions if isinstance(function, FunctionType)]
    pending += [
        member.__code__
        for module in modules
        for value in vars(module).values()
        if isinstance(value, type) and value.__module__ == module.__name__
        for member in [
            *vars(value).values(),
            *(p.fget for p in vars(value).values() if isinstance(p, property)),
        ]
        if isinstance(member, FunctionType)
    ]
    while pending:
        code = pending.pop()
        if code not in found:
            found.add(code)
            pending.extend(c for c in code.co_consts if isinstance(c, CodeType))
    return frozenset(found)


def _finalizing(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside a ``__del__`` (where CPython swallows exceptions)."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


@final
class Interrupter:
    """Raise KeyboardInterrupt at the n-th point a signal handler could raise it.

    Counts only the points inside ``codes`` (the library's own functions) and
    only while no exception is being handled (a second interrupt during the
    cleanup of a first is another matter). Used as a context manager around
    one call; ``fired`` tells whether the n-th point was reached.
    """

    def __init__(self, codes: frozenset[CodeType], n: int) -> None:
        self._codes = codes
        self._n = n
        self._seen = 0
        # Per frame: the offset where the next instruction is a point (just
        # after a call that returned, or anywhere after a backward jump).
        self._next: dict[FrameType, int | None] = {}
        self._ops: dict[CodeType, dict[int, int | None]] = {}
        self.fired = False

    def _after(self, code: CodeType, offset: int) -> int | None:
        """Where a point follows the instruction at ``offset``: -1 anywhere, an
        offset, or None."""
        ops = self._ops.get(code)
        if ops is None:
            ops = self._ops[code] = {}
            instructions = list(dis.get_instructions(code))
            for here, following in zip(instructions, [*instructions[1:], None], strict=True):
                if here.opname == "JUMP_BACKWARD":
                    ops[here.offset] = -1
                elif here.opname in _BREAKERS and following is not None:
                    ops[here.offset] = following.offset  # returned normally, not raised
        return ops.get(offset)

    def _global(self, frame: FrameType, event: str, arg: object) -> Any:
        if frame.f_code not in self._codes or _finalizing(frame):
            return None
        # f_trace before f_trace_opcodes, or 3.12.1 sends no opcode events.
        frame.f_trace = self._local
        frame.f_trace_opcodes = True
        self._next[frame] = -1  # a function starting or a generator resuming
        return self._local

    def _local(self, frame: FrameType, event: str, arg: object) -> Any:
        if event == "opcode":
            expected = self._next.get(frame)
            point = expected in (-1, frame.f_lasti)
            self._next[frame] = self._after(frame.f_code, frame.f_lasti)
            if point and not self.fired and sys.exception() is None:
                self._seen += 1
                if self._seen == self._n:
                    self.fired = True
                    raise KeyboardInterrupt
        elif event == "return":
            self._next.pop(frame, None)
        return self._local

    def __enter__(self) -> Interrupter:
        self._previous = sys.gettrace()
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(self._previous)
