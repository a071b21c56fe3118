"""The private-attribute linter (tools/private_attributes.py) catches what it must, only that."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from private_attributes import PACKAGES, find_private_accesses, findings, main, modules


def test_the_tree_reaches_into_no_private_attribute() -> None:
    """Every module under packages/ (code and tests) uses public APIs of what it did not
    write (``nox -s lint`` runs the same check; this keeps it in the tools' suite)."""
    assert len(modules([PACKAGES])) > 50  # the walk found the tree
    assert [] == findings([PACKAGES])


def test_the_command_line_reports_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A finding is printed with its path and line, and the exit status is 1; a clean
    file gives 0; a path with no module is an error (2), never a silent pass."""
    bad, good = tmp_path / "bad.py", tmp_path / "good.py"
    bad.write_text("import threading\nthreading._shutdown()\n", encoding="utf-8")
    good.write_text("import os\nos._exit\n", encoding="utf-8")
    assert (1, 0, 2) == (main([str(bad)]), main([str(good)]), main([str(tmp_path / "none")]))
    out = capsys.readouterr().out
    assert f"{bad}:2: threading._shutdown" in out


# --- the check catches what it must, and only that ----------------------------------------


def test_modules_checked_together_are_ours() -> None:
    """A private-looking module checked alongside (``bench/_common.py``) is ours; from
    anywhere else it is not."""
    code = "from _common import Report\n"
    assert [] == find_private_accesses(code, frozenset({"_common"}))
    assert ["1: from _common import Report"] == find_private_accesses(code)


#: The heart of sched-cmd's old ``_wakeup.py``: a hook queued on ``Event._cond._waiters``.
OLD_WAKEUP = """
import collections
import contextlib
import threading


def _set_releases_foreign_waiters() -> bool:
    event = threading.Event()
    waiters = getattr(getattr(event, "_cond", None), "_waiters", None)
    if not isinstance(waiters, collections.deque):
        return False
    probe = _Probe()
    waiters.append(probe)
    event.set()
    return probe.released and probe not in waiters


def _hook(event, wakeup):
    condition = getattr(event, "_cond", None)
    waiters = getattr(condition, "_waiters", None)
    hook = _SetHook(wakeup)
    with condition:
        waiters.append(hook)
"""


def test_the_check_catches_the_old_event_hook() -> None:
    """The old stop-event hook (Event._cond._waiters, through getattr) is reported, line by line."""
    assert [
        '9: getattr(getattr(event, "_cond", None), "_waiters", None)',
        '9: getattr(event, "_cond", None)',
        '19: getattr(event, "_cond", None)',
        '20: getattr(condition, "_waiters", None)',
    ] == find_private_accesses(OLD_WAKEUP)


def _cases(text: str) -> list[str]:
    """Code snippets separated by lines of dashes."""
    return [case.strip() + "\n" for case in textwrap.dedent(text).split("\n---\n")]


@pytest.mark.parametrize(
    "code",
    _cases(
        """
        def hook(event):
            return event._cond._waiters
        ---
        import threading
        threading._shutdown()
        ---
        from threading import _shutdown
        ---
        import _collections_abc
        ---
        def patch(monkeypatch, cond):
            monkeypatch.setattr(cond, "_waiters", [])
        ---
        # The self of a plain function (one patched onto a stdlib class) is not ours.
        def notify(self, n=1):
            return self._waiters
        ---
        class Handler:
            def emit(self, record):
                return record._private
        ---
        import logging
        class H(logging.Handler):
            def f(self):
                return super()._x
        ---
        # A chain off self: self.proc is a Popen, somebody else's object.
        import subprocess
        class Runner:
            def __init__(self):
                self.proc = subprocess.Popen(["true"])
            def f(self):
                return self.proc._waitpid_lock
        ---
        # A class that reads a private name by string does not make it its own.
        class W:
            def f(self, event):
                return getattr(event, "_cond")
        """
    ),
)
def test_the_check_reports_private_access_on_objects_not_ours(code: str) -> None:
    """Attribute chains, module attributes, imports, getattr and setattr by name are caught."""
    assert find_private_accesses(code), code


@pytest.mark.parametrize(
    "code",
    _cases(
        """
        class A:
            __slots__ = ("_x",)
            def f(self):
                return self._x
        ---
        class A:
            @classmethod
            def f(cls):
                return cls._registry
        ---
        class A:
            def f(self):
                def g():
                    return self._x
                return g
        ---
        class A:
            def __init__(self, v):
                object.__setattr__(self, "_v", v)
            def __eq__(self, other):
                return other._v
        ---
        import sched_cmd._child
        sched_cmd._child._HAVE_PIDFD
        ---
        from ._core import _helper
        ---
        from . import _core
        _core._private
        ---
        def _local():
            pass
        _local._attr = 1
        ---
        from ._server import Server
        def f(server: Server[int] | None, other: "Server"):
            return server._loop, other._loop
        ---
        from ._server import Server
        class Protocol:
            def __init__(self, server: Server):
                self._server = server
            def f(self):
                server = self._server
                return server._loop, self._server._loop
        ---
        from ._broker import Broker
        broker = Broker()
        def main():
            broker._ready.set()
        ---
        import os
        os._exit(0)
        ---
        import enum
        class C(enum.Enum):
            A = 1
            def f(self):
                return self._value_
        ---
        from _thread import LockType
        ---
        x = point._replace(y=1)
        """
    ),
)
def test_the_check_allows_what_is_ours_and_what_is_documented(code: str) -> None:
    """self/cls, objects typed or built as ours, our modules and documented names pass."""
    assert [] == find_private_accesses(code), code
