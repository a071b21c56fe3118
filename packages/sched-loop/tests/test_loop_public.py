"""The public surface: what sched_loop exports, what importing it costs."""

from __future__ import annotations

import pickle
import subprocess
import sys
import traceback
from importlib.metadata import version

import pytest

import sched_loop
from sched_loop import LoopConfigError, LoopError

PUBLIC = {
    "AsyncJob",
    "Job",
    "LoopConfigError",
    "LoopError",
    "arun_loop",
    "astop_on_signals",
    "jittered_delay",
    "run_loop",
    "stop_on_signals",
}


def test_all_lists_exactly_the_public_names() -> None:
    """__all__ is the public API, and every name in it resolves (lazy ones included)."""
    assert PUBLIC == set(sched_loop.__all__)
    for name in sched_loop.__all__:
        assert getattr(sched_loop, name) is not None
    assert PUBLIC <= set(dir(sched_loop))


def test_version_comes_from_the_installed_metadata() -> None:
    """__version__ is the distribution's version."""
    assert version("sched-loop") == sched_loop.__version__


def test_unknown_attribute_is_an_attribute_error() -> None:
    """A missing name raises AttributeError naming it."""
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = sched_loop.no_such_name  # type: ignore[attr-defined]


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
