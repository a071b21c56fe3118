"""The started child: signal delivery, exit notification and the group sweep.

On Linux the child's exit is a readable pidfd (``os.pidfd_open``, Linux 5.3+)
and signals go through it (``signal.pidfd_send_signal``), so a recycled pid
can never be signalled. Where pidfds are missing (macOS, old kernels, a
seccomp filter) a waiter thread reaps the child and writes to a pipe instead.
With ``kill_group`` the child leads its own process group and every signal
goes to the whole group with ``os.killpg``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from typing import Any, final

from ._wakeup import start_with_signals_blocked

__all__ = ["Child"]

_HAVE_PIDFD = hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")


@final
class Child:
    """A started ``Popen`` with an exit descriptor and a signal target."""

    __slots__ = (
        "_exit_fd",
        "_lock",
        "_pidfd",
        "_terminated",
        "_waiter",
        "group_signals",
        "pgid",
        "proc",
        "survivors",
    )

    def __init__(self, proc: subprocess.Popen[Any], *, kill_group: bool) -> None:
        self.proc = proc
        self.pgid: int | None = proc.pid if kill_group else None
        #: The signals delivered to the group, each once, in order (``kill_group``).
        self.group_signals: list[signal.Signals] = []
        #: Whether `group_alive` found members after the child exited.
        self.survivors = False
        self._pidfd: int | None = None
        self._waiter: threading.Thread | None = None
        self._lock = threading.Lock()
        self._terminated = False
        if _HAVE_PIDFD:
            try:
                self._pidfd = os.pidfd_open(proc.pid)
            except OSError:
                self._pidfd = None
        if self._pidfd is not None:
            self._exit_fd = self._pidfd
        else:
            self._exit_fd = self._start_waiter()

    def _start_waiter(self) -> int:
        read_fd, write_fd = os.pipe()

        def wait() -> None:
            try:
                self.proc.wait()
            finally:
                os.close(write_fd)  # EOF on read_fd: the child is reaped

        self._waiter = threading.Thread(target=wait, name="sched_cmd child waiter", daemon=True)
        start_with_signals_blocked(self._waiter)
        return read_fd

    def exit_fd(self) -> int:
        """Return a descriptor that becomes readable once the child has exited."""
        return self._exit_fd

    def reap(self) -> int:
        """Reap the exited child and return its returncode (it does not block long)."""
        return self.proc.wait()

    def terminate(self) -> bool:
        """Send SIGTERM once; later calls do nothing. Safe from any thread.

        Returns:
            Whether this call sent it.
        """
        with self._lock:
            if self._terminated:
                return False
            self.send(signal.SIGTERM)  # should it raise, a later call tries again
            self._terminated = True
        return True

    def send(self, sig: signal.Signals) -> None:
        """Send *sig* to the child, or to its whole group under ``kill_group``."""
        if self.pgid is not None:
            # The group may be gone, or hold only members we may not signal.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, sig)
                if sig not in self.group_signals:
                    self.group_signals.append(sig)
            return
        if self.proc.returncode is not None:
            return  # reaped: the pid may belong to someone else now
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, sig)
            else:
                self.proc.send_signal(sig)
        except ProcessLookupError:
            pass  # exited, not reaped yet

    def group_alive(self) -> bool:
        """Tell whether a member of the child's group is still alive (``kill_group`` only).

        Call it only after the child itself was reaped. Zombies are not
        survivors: members that became our children (we are PID 1 or a
        subreaper) are reaped first, and on Linux, where a reaper that never
        reaps can leave zombies in the group, ``/proc`` tells the living apart.
        """
        if self.pgid is None:
            return False
        try:
            while os.waitpid(-self.pgid, os.WNOHANG)[0] != 0:
                pass
        except ChildProcessError:
            pass
        try:
            os.killpg(self.pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        alive = _has_live_member(self.pgid)
        self.survivors = self.survivors or alive
        return alive

    def close(self) -> None:
        """Release the exit descriptor (the child must be reaped already)."""
        if self._waiter is not None:
            self._waiter.join()
        os.close(self._exit_fd)


def _has_live_member(pgid: int) -> bool:
    """Tell whether a process of group *pgid* is alive (not a zombie), by ``/proc``.

    Where ``/proc`` is missing (macOS), assume it is: ``killpg(pgid, 0)`` found one.
    """
    from pathlib import Path

    try:
        entries = list(Path("/proc").iterdir())
    except OSError:
        return True
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue  # it exited meanwhile
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = stat[stat.rindex(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False
