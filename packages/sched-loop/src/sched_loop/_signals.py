"""`stop_on_signals`: a ``threading.Event`` set by SIGTERM/SIGINT, safely.

Setting a ``threading.Event`` from inside a Python signal handler can
deadlock: the handler runs in the main thread between two bytecodes, and if
the main thread is inside ``Event.wait()`` or ``Event.set()`` at that moment
it already holds the event's internal lock, which ``set()`` then tries to
take again. So the handler never touches the event. Instead:

* ``signal.set_wakeup_fd`` makes the interpreter's C-level handler write the
  signal number to a pipe the moment the signal arrives;
* a helper thread blocked in ``read()`` on that pipe sets the event (from an
  ordinary thread, where taking the lock is always safe);
* the Python-level handler, which runs later in the main thread, only counts:
  under the ``"force"`` policy, from the second signal on it restores the
  default action (``SIG_DFL``) and re-delivers the signal, so a second
  Ctrl-C stops the process at once; under ``"catch"`` it does nothing more.

On exit the previous handlers and the previous wakeup fd are put back, the
helper thread is joined and the pipe is closed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from types import FrameType
from typing import Any, Literal, TypeAlias

from ._errors import LoopConfigError
from ._stopwatch import start_helper

#: The signals a container runtime (SIGTERM) and a terminal (SIGINT) stop with.
DEFAULT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)

#: What ``signal.signal`` accepts and ``signal.getsignal`` returns (less ``None``).
Handler: TypeAlias = Callable[[int, FrameType | None], Any] | int | signal.Handlers

#: What a second signal may do while the helper is open: end the process with
#: the signal's default action ("force"), or be caught like the first ("catch").
_POLICIES = ("force", "catch")

_WAKE = b"\0"  # not a signal number: tells the helper thread to finish


def check_policy(second_signal: object, helper: str) -> bool:
    """Validate *second_signal* for *helper*; return whether a second signal forces exit."""
    if second_signal not in _POLICIES:
        raise LoopConfigError(
            f"{helper}(): second_signal must be 'force' or 'catch', not {second_signal!r}"
        )
    return second_signal == "force"


def check_signals(signals: Iterable[int], helper: str) -> tuple[signal.Signals, ...]:
    """Validate a signal list for *helper*: known numbers, deduplicated, not empty,
    and the calling thread is the main thread (where handlers can be installed).
    """
    if threading.current_thread() is not threading.main_thread():
        raise LoopConfigError(f"{helper}() must be entered in the main thread")
    result: list[signal.Signals] = []
    for number in signals:
        try:
            sig = signal.Signals(number)
        except ValueError:
            raise LoopConfigError(f"{helper}(): {number!r} is not a signal") from None
        if sig not in result:
            result.append(sig)
    if not result:
        raise LoopConfigError(f"{helper}() needs at least one signal")
    return tuple(result)


def redeliver_default(signum: int) -> None:
    """Give *signum* its default action back and deliver it again (the second signal)."""
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)


def previous_or_default(previous: Handler | None) -> Handler:
    """The handler to restore: ``None`` (one not installed from Python) becomes ``SIG_DFL``."""
    return signal.SIG_DFL if previous is None else previous


def _watch(
    rfd: int, wanted: frozenset[int], stop: threading.Event, closing: threading.Event
) -> None:
    """Helper thread: set *stop* when the wakeup pipe reports one of *wanted*."""
    while True:
        data = os.read(rfd, 512)
        if not wanted.isdisjoint(data):
            stop.set()
        if not data or closing.is_set():
            return


def _finish_watcher(wfd: int, watcher: threading.Thread, closing: threading.Event) -> None:
    closing.set()
    # A full pipe means the helper has bytes to read and will see `closing` anyway.
    with contextlib.suppress(BlockingIOError):
        os.write(wfd, _WAKE)
    watcher.join()


@contextlib.contextmanager
def stop_on_signals(
    signals: Iterable[int] = DEFAULT_SIGNALS,
    *,
    second_signal: Literal["force", "catch"] = "force",
) -> Iterator[threading.Event]:
    """Turn the first of *signals* into a set ``threading.Event``.

    Pass the event to `run_loop` as its ``stop`` so SIGTERM drains the loop
    (the run in flight finishes, no new run starts). What a second signal
    does while the block runs is *second_signal*'s choice:

    * ``"force"`` (the default): it restores that signal's default action and
      re-delivers it, so a second Ctrl-C (or SIGTERM) ends the process at
      once, without cleanup. This is what a Go program gets by calling
      ``stop()`` as soon as ``signal.NotifyContext``'s context is done.
    * ``"catch"``: it is caught like the first, and so is every later one,
      until the block exits: a daemon whose drain must not be cut short by a
      second SIGTERM. This is Go's ``signal.NotifyContext`` with ``defer
      stop()``.

    The event is never set inside a signal handler, so a ``wait()`` on it in
    the main thread cannot deadlock: a helper thread woken through
    ``signal.set_wakeup_fd`` sets it.

    On exit the previous handlers and the previous wakeup fd are restored; the
    event stays as it is. While the block runs it owns the process's wakeup
    fd, so inside a running asyncio loop use `astop_on_signals` instead.

    Args:
        signals: the signals to handle; SIGTERM and SIGINT by default.
        second_signal: ``"force"`` or ``"catch"``, as above.

    Yields:
        The stop event, set by the first signal.

    Raises:
        LoopConfigError: not in the main thread, no signals, an unknown
            signal number or an unknown *second_signal*. It is a
            ``ValueError``.
        OSError: a signal cannot be caught (``SIGKILL``, ``SIGSTOP``).
    """
    sigs = check_signals(signals, "stop_on_signals")
    force = check_policy(second_signal, "stop_on_signals")
    stop = threading.Event()
    received = 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        # Runs in the main thread: never touch `stop` here (see the module notes).
        nonlocal received
        received += 1
        if received > 1 and force:
            redeliver_default(signum)

    with contextlib.ExitStack() as undo:  # undone in reverse order
        rfd, wfd = os.pipe()
        undo.callback(os.close, rfd)
        undo.callback(os.close, wfd)
        os.set_blocking(wfd, False)  # set_wakeup_fd requires it
        closing = threading.Event()
        watcher = threading.Thread(
            target=_watch,
            args=(rfd, frozenset(int(s) for s in sigs), stop, closing),
            name="sched_loop-signals",
            daemon=True,
        )
        # The helper starts with every signal blocked (a new thread inherits the
        # creating thread's mask), so the kernel never picks it for them: they go
        # to the main thread, interrupt its blocking call at once, and the Python
        # handler (which counts, and re-delivers the second) runs without delay.
        start_helper(watcher)
        undo.callback(_finish_watcher, wfd, watcher, closing)
        previous_fd = signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        undo.callback(signal.set_wakeup_fd, previous_fd)
        for sig in sigs:
            previous = signal.signal(sig, on_signal)
            undo.callback(signal.signal, sig, previous_or_default(previous))
        yield stop
