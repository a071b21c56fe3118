"""The public surface: what sched_loop exports, what importing it costs."""

from __future__ import annotations

import pickle
import subprocess
import sys
import traceback

from sched_loop import LoopConfigError, LoopError


def test_errors_form_one_hierarchy_with_the_builtins() -> None:
    """LoopConfigError is both the package's LoopError and a ValueError."""
    assert issubclass(LoopConfigError, LoopError)
    assert issubclass(LoopConfigError, ValueError)


def test_errors_show_and_pickle_under_their_public_name() -> None:
    """Tracebacks name sched_loop.LoopConfigError; the error survives a pickle round trip."""
    error = LoopConfigError("interval must be positive, got 0")
    assert (
        "sched_loop.LoopConfigError: interval must be positive, got 0"
        == "".join(traceback.format_exception_only(error)).strip()
    )
    copy = pickle.loads(pickle.dumps(error))
    assert (LoopConfigError, error.args) == (type(copy), copy.args)


def test_importing_the_package_does_not_import_asyncio() -> None:
    """The sync API stays light: asyncio loads only when an asyncio twin is used."""
    code = (
        "import sys, sched_loop\n"
        "print('asyncio' in sys.modules)\n"
        "sched_loop.arun_loop\n"
        "print('asyncio' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert ["False", "True"] == out.split()
