"""The started child: signal delivery, exit notification and the group sweep.

On Linux the child's exit is a readable pidfd (``os.pidfd_open``, Linux 5.3+)
and signals go through it (``signal.pidfd_send_signal``), so a recycled pid
can never be signalled. Where pidfds are missing (macOS, old kernels, a
seccomp filter) a waiter thread reaps the child and writes to a pipe instead.
With ``kill_group`` the child leads its own process group and every signal
goes to the whole group with ``os.killpg``.

A `Child` exists before its process does, and holds everything the start
creates from the moment it exists: the ``Popen`` (`_Popen` puts itself in
the child's hands before it forks) and the exit descriptors (see
``_atomic``). So an exception landing anywhere in `Child.start` (a
``KeyboardInterrupt`` from a signal handler) leaves `Child.abort` and
`Child.close` something they can see: they kill and reap the process and
close every descriptor. One gap is inside CPython's ``Popen`` itself,
between the fork and the moment it records the pid, which is where a
signal that arrived during the fork is handled: on Linux the children of
the starting thread, read from ``/proc`` before the start, show the process
all the same, and it is killed and reaped; elsewhere it is out of sight and
keeps running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Mapping
from datetime import UTC, datetime

from ._compat import TYPE_CHECKING, final

if TYPE_CHECKING:
    from typing import Any

    _PopenBase = subprocess.Popen[Any]
else:  # no typing at import
    _PopenBase = subprocess.Popen

from ._atomic import close_all, store, store_each
from ._stopwatch import start_helper

__all__ = ["Child"]

_HAVE_PIDFD = hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")


class _Popen(_PopenBase):
    """A ``Popen`` that is in *owner* before it starts the process (see the module notes)."""

    def __init__(self, owner: list[subprocess.Popen[Any]], args: Any, **kwargs: Any) -> None:
        owner.append(self)
        super().__init__(args, **kwargs)


@final
class Child:
    """A child process to start, with an exit descriptor and a signal target."""

    __slots__ = (
        "_before",
        "_exit_fds",
        "_kill_group",
        "_lock",
        "_pidfd",
        "_waiter",
        "group_signals",
        "procs",
        "sigkill_at",
        "sigterm_at",
        "sigterm_reason",
        "survivors",
    )

    def __init__(self, *, kill_group: bool) -> None:
        self._kill_group = kill_group
        #: The ``Popen``, once `start` made it: one item at most.
        self.procs: list[subprocess.Popen[Any]] = []
        #: The signals delivered to the group, each once, in order (``kill_group``).
        self.group_signals: list[signal.Signals] = []
        #: Whether `group_alive` found members after the child exited.
        self.survivors = False
        #: When SIGTERM / SIGKILL were sent to the child (its group), and why SIGTERM was.
        self.sigterm_at: datetime | None = None
        self.sigterm_reason = ""
        self.sigkill_at: datetime | None = None
        self._exit_fds: list[int] = []  # the pidfd, or the waiter's pipe [read, write]
        self._before: frozenset[int] | None = None  # this thread's children before the start
        self._pidfd = False
        self._waiter: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def proc(self) -> subprocess.Popen[Any]:
        """The started ``Popen``."""
        return self.procs[0]

    @property
    def pgid(self) -> int | None:
        """The child's process group under ``kill_group`` (its pid), else ``None``."""
        return self.procs[0].pid if self._kill_group and self.procs else None

    def start(self, args: Any, popen_kwargs: Mapping[str, Any]) -> None:
        """Start the process and its exit notification.

        Raises:
            OSError: the command could not be started (``Popen``'s errors).
        """
        self._before = _thread_children()
        _Popen(self.procs, args, **popen_kwargs)
        pid = self.procs[0].pid
        if _HAVE_PIDFD:
            with contextlib.suppress(OSError):  # no pidfd here (seccomp, an old kernel)
                store(self._exit_fds, os.pidfd_open, pid)
            self._pidfd = bool(self._exit_fds)
        if not self._exit_fds:
            self._start_waiter()

    def _start_waiter(self) -> None:
        store_each(self._exit_fds, os.pipe)

        def wait() -> None:
            # It holds the Child (self), so that no collection closes the pipe under it.
            try:
                self.procs[0].wait()
            finally:
                os.write(self._exit_fds[1], b"!")  # the read end is readable: reaped

        self._waiter = threading.Thread(target=wait, name="sched_cmd child waiter", daemon=True)
        start_helper(self._waiter)

    def exit_fd(self) -> int:
        """Return a descriptor that becomes readable once the child has exited."""
        return self._exit_fds[0]

    def reap(self) -> int:
        """Reap the exited child and return its returncode (it does not block long)."""
        return self.procs[0].wait()

    def terminate(self, reason: str) -> bool:
        """Send SIGTERM once, for *reason*; later calls do nothing. Safe from any thread.

        Returns:
            Whether this call sent it.
        """
        with self._lock:
            if self.sigterm_at is not None or not self.send(signal.SIGTERM):
                return False
            self.sigterm_reason = reason
            return True

    def send(self, sig: signal.Signals) -> bool:
        """Send *sig* to the child, or to its whole group under ``kill_group``.

        Returns:
            Whether it was sent (false once the child is reaped or gone).
        """
        sent = self._send(sig)
        if sent:
            now = datetime.now(UTC)
            if sig == signal.SIGTERM and self.sigterm_at is None:
                self.sigterm_at = now
            elif sig == signal.SIGKILL and self.sigkill_at is None:
                self.sigkill_at = now
        return sent

    def _send(self, sig: signal.Signals) -> bool:
        pgid = self.pgid
        if pgid is not None:
            # The group may be gone, or hold only members we may not signal.
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                return False
            if sig not in self.group_signals:
                self.group_signals.append(sig)
            return True
        proc = self.procs[0]
        if proc.returncode is not None:
            return False  # reaped: the pid may belong to someone else now
        try:
            if self._pidfd and self._exit_fds:
                signal.pidfd_send_signal(self._exit_fds[0], sig)
            else:
                proc.send_signal(sig)
        except ProcessLookupError:
            return False  # exited, not reaped yet
        return proc.returncode is None  # send_signal() may have found it reaped

    def group_alive(self) -> bool:
        """Tell whether a member of the child's group is still alive (``kill_group`` only).

        Call it only after the child itself was reaped. Zombies are not
        survivors: members that became our children (we are PID 1 or a
        subreaper) are reaped first, and on Linux, where a reaper that never
        reaps can leave zombies in the group, ``/proc`` tells the living apart.
        """
        pgid = self.pgid
        if pgid is None:
            return False
        try:
            while os.waitpid(-pgid, os.WNOHANG)[0] != 0:
                pass
        except ChildProcessError:
            pass
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        alive = _has_live_member(pgid)
        self.survivors = self.survivors or alive
        return alive

    def abort(self) -> None:
        """On an unexpected exception (``KeyboardInterrupt``...): SIGKILL the child, reap it.

        Whatever `start` got to is seen: a process whose ``Popen`` failed
        after the fork (the exception landed inside it) is killed and reaped
        too.
        """
        if not self.procs or getattr(self.procs[0], "pid", None) is None:
            self._abort_unseen()
            return
        proc = self.procs[0]
        if proc.returncode is None:
            self.send(signal.SIGKILL)
            proc.wait()
        if self.group_alive():
            self.send(signal.SIGKILL)

    def _abort_unseen(self) -> None:
        """Kill and reap a process ``Popen`` started but never recorded (see the module notes).

        It is a child of this thread that was not there before the start; it
        stays ours until reaped, so its pid cannot have been reused.
        """
        if self._before is None:
            return  # the start was not reached, or there is no /proc to look in
        after = _thread_children()
        for pid in sorted((after or frozenset()) - self._before):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    def close(self) -> None:
        """Release the exit descriptors and the pipes (the child must be reaped already)."""
        try:
            if self._waiter is not None and self._waiter.ident is not None:
                self._waiter.join()
        finally:
            try:
                close_all(self._exit_fds)
            finally:
                if self.procs:
                    _close_pipes(self.procs[0])

    def __del__(self) -> None:
        # Only a Child whose run was interrupted before close() gets here open.
        fds = getattr(self, "_exit_fds", None)
        if fds:
            close_all(fds)


def _thread_children() -> frozenset[int] | None:
    """The calling thread's child processes, from ``/proc`` (Linux); ``None`` elsewhere."""
    from pathlib import Path

    try:
        listed = Path(f"/proc/self/task/{threading.get_native_id()}/children").read_bytes()
    except OSError:
        return None
    return frozenset(int(pid) for pid in listed.split())


def _close_pipes(proc: subprocess.Popen[Any]) -> None:
    # A Popen interrupted before it set them up has no pipes yet.
    for name in ("stdin", "stdout", "stderr"):
        stream = getattr(proc, name, None)
        if stream is not None:
            # A broken stdin pipe: nothing was buffered, nothing is lost.
            with contextlib.suppress(OSError):
                stream.close()


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
