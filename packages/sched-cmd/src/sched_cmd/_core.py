"""The one waiting loop behind `run` and `arun`.

Everything the run waits for is a descriptor in one selector: the output
pipes, the input pipe, the child's exit (a pidfd, or a waiter thread's pipe)
and the `Wakeup` self-pipe that stop and cancellation requests write to. The
only timers are deadlines (the timeout, the end of the grace), passed to
``select`` as its timeout; nothing is polled, except while sweeping a
``kill_group`` child's leftover group members, which no descriptor reports.
"""

from __future__ import annotations

import contextlib
import functools
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from ._child import Child
from ._compat import TYPE_CHECKING, final
from ._durations import Duration, to_timedelta
from ._result import CompletedRun, GroupReport
from ._wakeup import Wakeup

if TYPE_CHECKING:
    import logging
    from typing import Any, Final, TypeAlias

__all__ = ["DEFAULT_GRACE", "Command", "Input", "Options", "execute"]

#: The grace period of the Go library's ``DefaultGrace``: after SIGTERM, the
#: child has this long to exit before SIGKILL.
DEFAULT_GRACE: Final = timedelta(seconds=5)

_PathLike: TypeAlias = "str | bytes | os.PathLike[str] | os.PathLike[bytes]"
#: What ``args`` accepts: what ``subprocess.run`` accepts.
Command: TypeAlias = "str | bytes | os.PathLike[str] | os.PathLike[bytes] | Sequence[_PathLike]"
#: What ``input`` accepts: bytes-like, or ``str`` in text mode.
Input: TypeAlias = "bytes | bytearray | memoryview | str"

_CHUNK = 1 << 16
_INFO = 20  # logging.INFO, without importing logging until a message is due
_SWEEP_FIRST_CHECK = 0.001
_SWEEP_MAX_CHECK = 0.05
_TEXT_KEYS = ("text", "universal_newlines", "encoding", "errors")
#: The reason of a SIGTERM sent for a stop request (the stop event, a cancellation).
_STOP_REQUESTED = "stop requested"


def _logger(logger: logging.Logger | None) -> logging.Logger:
    if logger is not None:
        return logger
    import logging

    return logging.getLogger("sched_cmd")


def go_duration(value: timedelta) -> str:
    """Format *value* the way Go's ``Duration.String`` does (``5s``, ``1m30s``, ``250ms``)."""
    micros = value // timedelta(microseconds=1)
    sign, micros = ("-", -micros) if micros < 0 else ("", micros)
    if micros == 0:
        return "0s"
    if micros < 1_000:
        return f"{sign}{micros}µs"
    if micros < 1_000_000:
        return f"{sign}{_decimal(micros, 3)}ms"
    seconds, fraction = divmod(micros, 1_000_000)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    text = _decimal(seconds * 1_000_000 + fraction, 6) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text


def _decimal(value: int, digits: int) -> str:
    whole, rest = divmod(value, 10**digits)
    return f"{whole}.{rest:0{digits}d}".rstrip("0").rstrip(".")


@final
class Options:
    """The validated arguments of one run, shared by `run`, `arun` and the runner."""

    __slots__ = (
        "args",
        "capture_output",
        "check",
        "grace",
        "input",
        "kill_group",
        "logger",
        "popen_kwargs",
        "text_mode",
        "timeout",
    )

    def __init__(
        self,
        args: Command,
        *,
        grace: Duration,
        timeout: Duration | None,
        kill_group: bool,
        check: bool,
        input: Input | None,
        capture_output: bool,
        logger: logging.Logger | None,
        popen_kwargs: Mapping[str, Any],
    ) -> None:
        grace_td = to_timedelta(grace, name="grace")
        self.grace = grace_td if grace_td > timedelta(0) else DEFAULT_GRACE
        self.timeout = None if timeout is None else to_timedelta(timeout, name="timeout")
        self.args = args
        self.kill_group = kill_group
        self.check = check
        self.input = input
        self.capture_output = capture_output
        self.logger = logger
        kwargs = dict(popen_kwargs)
        if input is not None:
            if kwargs.get("stdin") is not None:
                raise ValueError("stdin and input arguments may not both be used.")
            kwargs["stdin"] = subprocess.PIPE
        if capture_output:
            if kwargs.get("stdout") is not None or kwargs.get("stderr") is not None:
                raise ValueError("stdout and stderr arguments may not be used with capture_output.")
            kwargs["stdout"] = subprocess.PIPE
            kwargs["stderr"] = subprocess.PIPE
        if isinstance(input, str) and not any(kwargs.get(key) for key in _TEXT_KEYS):
            raise TypeError("input must be bytes-like unless the run is in text mode, not str")
        if kill_group and not kwargs.get("start_new_session"):
            group = kwargs.get("process_group")
            if group not in (None, 0):
                raise ValueError(
                    "kill_group=True makes the child lead its own process group: "
                    f"process_group must be 0 or unset, not {group!r}"
                )
            kwargs["process_group"] = 0
        self.popen_kwargs = kwargs
        self.text_mode = any(kwargs.get(key) for key in _TEXT_KEYS)

    def not_started(self) -> Outcome:
        """The outcome of a run whose stop was requested before the child started."""
        empty: str | bytes = "" if self.text_mode else b""
        piped = subprocess.PIPE
        return Outcome(
            self.args,
            -signal.SIGTERM,
            empty if self.popen_kwargs.get("stdout") == piped else None,
            empty if self.popen_kwargs.get("stderr") == piped else None,
            timed_out=False,
            stopped=True,
        )

    def finish(self, outcome: Outcome) -> CompletedRun[Any]:
        """Turn *outcome* into ``run``'s result, raising as ``subprocess.run`` does.

        Raises:
            subprocess.TimeoutExpired: the timeout passed (the child was stopped).
            CommandFailed: ``check`` and a non-zero returncode.
        """
        if outcome.timed_out:
            assert self.timeout is not None
            raise subprocess.TimeoutExpired(
                outcome.args, self.timeout.total_seconds(), outcome.stdout, outcome.stderr
            )
        result: CompletedRun[Any] = CompletedRun(
            outcome.args,
            outcome.returncode,
            outcome.stdout,
            outcome.stderr,
            group=outcome.group,
            stopped=outcome.stopped,
            sigterm_at=outcome.sigterm_at,
            sigkill_at=outcome.sigkill_at,
        )
        if self.check:
            result.check_returncode()  # CommandFailed
        return result


@final
class Outcome:
    """What a finished run produced, before ``check`` and the timeout are applied."""

    __slots__ = (
        "args",
        "group",
        "returncode",
        "sigkill_at",
        "sigterm_at",
        "stderr",
        "stdout",
        "stopped",
        "timed_out",
    )

    def __init__(
        self,
        args: Any,
        returncode: int,
        stdout: str | bytes | None,
        stderr: str | bytes | None,
        *,
        timed_out: bool,
        stopped: bool = False,
        sigterm_at: datetime | None = None,
        sigkill_at: datetime | None = None,
        group: GroupReport | None = None,
    ) -> None:
        self.args = args
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.timed_out = timed_out
        self.stopped = stopped
        self.sigterm_at = sigterm_at
        self.sigkill_at = sigkill_at
        self.group = group


def execute(options: Options, wakeup: Wakeup, child: Child | None = None) -> Outcome:
    """Start the child, feed and drain its pipes, stop it on request, reap it.

    Whatever interrupts it (an exception from a signal handler, at any point
    of this package's code), the child it could see is killed and reaped and
    every descriptor it opened is closed before the exception propagates.

    Args:
        options: the validated arguments.
        wakeup: carries stop and kill requests from other threads; a stop
            requested before the start means no child is started.
        child: a `Child` already started (by ``arun``, in the event loop's
            thread); this call owns it from now on. ``None``: start one here.

    Returns:
        The outcome; the child is always reaped.

    Raises:
        OSError: the child could not be started (``subprocess.Popen``'s errors).
    """
    if child is None:
        if wakeup.stop_requested or wakeup.kill_requested:
            return options.not_started()
        child = Child(kill_group=options.kill_group)  # owns nothing yet
        start = True
    else:
        start = False
    try:
        if start:
            child.start(options.args, options.popen_kwargs)
        with selectors.DefaultSelector() as selector:
            session = _Session(options, child, selector, wakeup)
            session.wait()
            return session.outcome()
    except BaseException:
        child.abort()
        raise
    finally:
        try:
            wakeup.set_stop_action(None)  # before the pidfd closes and its number is reused
        finally:
            child.close()


@final
class _Session:
    """The state of one waiting loop (see the module docstring)."""

    def __init__(
        self,
        options: Options,
        child: Child,
        selector: selectors.BaseSelector,
        wakeup: Wakeup,
    ) -> None:
        self.options = options
        self.proc = proc = child.proc
        self.child = child
        self.selector = selector
        self.wakeup = wakeup
        self.grace = options.grace.total_seconds()
        now = time.monotonic()
        self.timeout_at = None if options.timeout is None else now + options.timeout.total_seconds()
        self.deadline: float | None = None  # end of the grace: SIGKILL, pipes cut
        self.deadline_passed = False
        self.terminating = False
        self.sigterm_logged = False
        self.timed_out = False
        self.returncode: int | None = None
        self.group_done = not options.kill_group
        self.sweep_at: float | None = None
        self.sweep_delay = _SWEEP_FIRST_CHECK
        self.chunks: dict[int, list[bytes]] = {}
        self.input_view: memoryview | None = None
        self.input_pos = 0

        selector.register(wakeup.fileno(), selectors.EVENT_READ, "wakeup")
        # A stop request sends SIGTERM from the requesting thread at once; this
        # thread then wakes to start the grace and log it.
        wakeup.set_stop_action(functools.partial(child.terminate, _STOP_REQUESTED))
        selector.register(child.exit_fd(), selectors.EVENT_READ, "exit")
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                self.chunks[stream.fileno()] = []
                selector.register(stream.fileno(), selectors.EVENT_READ, "output")
        if proc.stdin is not None:
            self._setup_input(proc.stdin)

    def _setup_input(self, stdin: Any) -> None:
        data = self.options.input
        if data is None:
            self._close_stdin()
            return
        if isinstance(data, str):  # text mode (checked by Options): Popen chose the codec
            data = data.encode(stdin.encoding, stdin.errors)
        view = memoryview(data).cast("B")
        if not view:
            self._close_stdin()
            return
        self.input_view = view
        os.set_blocking(stdin.fileno(), False)
        self.selector.register(stdin.fileno(), selectors.EVENT_WRITE, "input")

    # -- the loop ---------------------------------------------------------

    def wait(self) -> None:
        """Run until the child is reaped, its pipes closed or cut, its group swept."""
        while not self._finished():
            events = self.selector.select(self._select_timeout())
            registered = self.selector.get_map()
            for key, _mask in events:
                if key.fd not in registered:
                    continue  # an earlier event of this batch closed it (exit, cut)
                if key.data == "output":
                    self._read(key.fd)
                elif key.data == "input":
                    self._write()
                elif key.data == "wakeup":
                    self._on_wakeup()
                else:
                    self._on_exit()
            self._on_time(time.monotonic())
        # The stop request's thread may have sent SIGTERM to a child whose exit
        # ended the loop before its wake-up byte was read: say so all the same.
        self._log_sigterm()

    def _finished(self) -> bool:
        return self.returncode is not None and not self._open_outputs() and self.group_done

    def _open_outputs(self) -> bool:
        return any(key.data == "output" for key in self.selector.get_map().values())

    def _select_timeout(self) -> float | None:
        candidates = [self.deadline, self.sweep_at]
        if not self.terminating:
            candidates.append(self.timeout_at)
        due = [when for when in candidates if when is not None]
        if not due:
            return None
        return max(0.0, min(due) - time.monotonic())

    def _on_time(self, now: float) -> None:
        if not self.terminating and self.timeout_at is not None and now >= self.timeout_at:
            self.timed_out = True
            if self.returncode is None:
                self._terminate(now, "timeout")
            else:  # exited, but its pipes are held open: the grace since the exit bounds it
                self.terminating = True
        if self.deadline is not None and not self.deadline_passed and now >= self.deadline:
            self._grace_over("still running at the end of the grace")
        if self.sweep_at is not None and now >= self.sweep_at:
            self._check_group(now)

    def _on_wakeup(self) -> None:
        self.wakeup.clear()
        now = time.monotonic()
        if self.wakeup.kill_requested and not self.deadline_passed:
            self.terminating = True
            self.deadline = now
            self._grace_over("kill requested")
        elif self.wakeup.stop_requested:
            if self.returncode is None:
                self._terminate(now, _STOP_REQUESTED)
            else:  # sent by the request's thread before the child exited, maybe
                self._log_sigterm()

    def _terminate(self, now: float, reason: str) -> None:
        """Send SIGTERM and start the grace (if it has not started)."""
        if self.terminating:
            return
        self.terminating = True
        if self.deadline is None:
            self.deadline = now + self.grace
        self.child.terminate(reason)  # a no-op if the stop request's thread already sent it
        self._log_sigterm()

    def _log_sigterm(self) -> None:
        """Log the SIGTERM a stop or the timeout sent, once, whichever thread sent it."""
        if self.sigterm_logged or self.child.sigterm_at is None:
            return
        self.sigterm_logged = True
        log = _logger(self.options.logger)
        if not log.isEnabledFor(_INFO):
            return
        reason = self.child.sigterm_reason
        log.info(
            "%s: sent SIGTERM to %s %d; SIGKILL in %s if it has not exited",
            reason,
            "process group" if self.child.pgid is not None else "pid",
            self.proc.pid,
            go_duration(self.options.grace),
            extra=self._extra(signal.SIGTERM, reason),
        )

    def _grace_over(self, why: str) -> None:
        """The grace is over: SIGKILL what is left; cut the pipes once the child is reaped."""
        self.deadline_passed = True
        if self.returncode is None:
            self._kill(why)
            return  # the exit event will finish the job
        self._cut_outputs()
        if not self.group_done and self.child.group_alive():
            self._kill("members still running at the end of the grace")
        self.group_done = True
        self.sweep_at = None

    def _kill(self, why: str) -> None:
        self.child.send(signal.SIGKILL)
        _logger(self.options.logger).warning(
            "%s %d: %s (grace %s); sent SIGKILL",
            "process group" if self.child.pgid is not None else "pid",
            self.proc.pid,
            why,
            go_duration(self.options.grace),
            extra=self._extra(signal.SIGKILL, why),
        )

    def _extra(self, sig: signal.Signals, reason: str) -> dict[str, Any]:
        extra: dict[str, Any] = {"sched_pid": self.proc.pid}
        if self.child.pgid is not None:  # a kill_group run only: never sched_pgid=None
            extra["sched_pgid"] = self.child.pgid
        extra.update(
            sched_signal=sig.name, sched_reason=reason, sched_grace=go_duration(self.options.grace)
        )
        return extra

    def _on_exit(self) -> None:
        self.selector.unregister(self.child.exit_fd())
        self.returncode = self.child.reap()
        now = time.monotonic()
        if self.deadline is None:
            self.deadline = now + self.grace
        if self.proc.stdin is not None:
            self._close_stdin()  # nobody is left to read it
        if self.deadline_passed:
            self._grace_over("killed")  # SIGKILLed: do not wait for the pipes any more
        elif not self.group_done:
            self._check_group(now)

    def _check_group(self, now: float) -> None:
        """After the child exited under ``kill_group``: sweep the members left behind."""
        if not self.child.group_alive():
            self.group_done = True
            self.sweep_at = None
            return
        if not self.terminating:
            self.terminating = True
        if self.child.terminate("group members left behind"):  # not sent yet by a stop
            self.sigterm_logged = True  # the line below says it
            _logger(self.options.logger).warning(
                "pid %d exited but its process group still has members; "
                "sent them SIGTERM, SIGKILL in %s",
                self.proc.pid,
                go_duration(self.options.grace),
                extra=self._extra(signal.SIGTERM, "group members left behind"),
            )
        # No descriptor reports an empty group: check again soon, backing off.
        self.sweep_at = now + self.sweep_delay
        self.sweep_delay = min(self.sweep_delay * 2, _SWEEP_MAX_CHECK)

    # -- pipes ------------------------------------------------------------

    def _read(self, fd: int) -> None:
        data = os.read(fd, _CHUNK)
        if data:
            self.chunks[fd].append(data)
        else:
            self.selector.unregister(fd)

    def _cut_outputs(self) -> None:
        """Take what the pipes hold now and stop waiting for their end."""
        for key in list(self.selector.get_map().values()):
            if key.data != "output":
                continue
            os.set_blocking(key.fd, False)
            try:
                while data := os.read(key.fd, _CHUNK):
                    self.chunks[key.fd].append(data)
            except BlockingIOError:
                _logger(self.options.logger).warning(
                    "an output pipe of pid %d was still open %s after it "
                    "exited or was stopped (another process holds it); stopped reading",
                    self.proc.pid,
                    go_duration(self.options.grace),
                    extra={"sched_pid": self.proc.pid, "sched_fd": key.fd},
                )
            self.selector.unregister(key.fd)

    def _write(self) -> None:
        assert self.proc.stdin is not None
        assert self.input_view is not None
        fd, start = self.proc.stdin.fileno(), self.input_pos
        try:
            self.input_pos += os.write(fd, self.input_view[start : start + _CHUNK])
        except BlockingIOError:
            return
        except BrokenPipeError:
            self.input_pos = len(self.input_view)  # the child stopped reading, as in subprocess
        if self.input_pos >= len(self.input_view):
            self._close_stdin()

    def _close_stdin(self) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.closed:
            return
        if self.input_view is not None:
            self.input_view.release()
            self.input_view = None
            self.selector.unregister(stdin.fileno())
        with contextlib.suppress(OSError):  # EPIPE on the flush of an empty buffer
            stdin.close()

    # -- endings ----------------------------------------------------------

    def outcome(self) -> Outcome:
        """Decode the captured output the way ``subprocess.run`` does."""
        assert self.returncode is not None
        group = None
        if self.child.pgid is not None:
            group = GroupReport(
                self.child.pgid, self.child.survivors, tuple(self.child.group_signals)
            )
        child = self.child
        stopped = child.sigterm_reason == _STOP_REQUESTED or (
            self.wakeup.kill_requested and child.sigkill_at is not None
        )
        return Outcome(
            self.proc.args,
            self.returncode,
            self._output(self.proc.stdout),
            self._output(self.proc.stderr),
            timed_out=self.timed_out,
            stopped=stopped,
            sigterm_at=child.sigterm_at,
            sigkill_at=child.sigkill_at,
            group=group,
        )

    def _output(self, stream: Any) -> str | bytes | None:
        if stream is None:
            return None
        data = b"".join(self.chunks[stream.fileno()])
        encoding = getattr(stream, "encoding", None)
        if encoding is None:
            return data
        text: str = data.decode(encoding, stream.errors)
        return text.replace("\r\n", "\n").replace("\r", "\n")
