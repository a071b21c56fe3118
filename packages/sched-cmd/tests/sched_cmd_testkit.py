"""Helpers shared by the sched-cmd tests: child programs, handshakes, /proc checks, interrupts.

Every signal test follows the same handshake: the child gets the write end of
a pipe (``pass_fds``), installs its handlers, and writes ``ready <pid>`` on it;
the test reads that line before it asks for a stop. Children report the
signals they received on the same pipe (``got SIGTERM``). Deadlines are
generous upper bounds, never the thing under test.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import final

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


# The interrupt sweep's tracer, shared with sched-exclusive's sweeps.
Interrupter = sched_testing.Interrupter
library_code = sched_testing.library_code
