"""The public surface and the import cost: what importing sched_interval loads."""

from __future__ import annotations

import subprocess
import sys

from sched_interval import DurationParseError, IntervalError, Mode, Schedule

# Modules the interval path must never load: the heavy ones the design keeps
# off every path that does not use them.
NEVER = [
    "asyncio",
    "dataclasses",
    "argparse",
    "typing",
    "logging",
    "json",
    "re",
    "subprocess",
    "threading",
]


def loaded_after(code: str, *argv: str) -> set[str]:
    """The modules a fresh interpreter holds after *code*, beyond a bare start."""
    probe = (
        "import sys\n"
        "before = set(sys.modules)\n"
        f"{code}\n"
        "after = sorted(set(sys.modules) - before)\n"
        "sys.__stdout__.write('\\n' + ' '.join(after))\n"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", probe, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(result.stdout.splitlines()[-1].split())


def test_import_loads_nothing_heavy() -> None:
    """import sched_interval loads no asyncio, logging, typing, dataclasses or re."""
    loaded = loaded_after("import sched_interval")
    assert "sched_interval" in loaded
    assert [] == [name for name in NEVER if name in loaded]


def test_parse_interval_without_warning_loads_no_logging() -> None:
    """A valid value with timedelta or Go-string durations imports neither logging nor typing."""
    loaded = loaded_after(
        "import sched_interval, datetime\n"
        "sched_interval.parse_interval('30m', datetime.timedelta(hours=6))\n"
        "sched_interval.parse_interval('off', '6h', bounds=('1m', '1h'))"
    )
    # (A number of seconds goes through the shared _durations module, which imports typing.)
    assert [] == [name for name in NEVER if name in loaded]


def test_a_warning_loads_logging_and_no_asyncio() -> None:
    """Logging is imported on the first warning; asyncio never is."""
    loaded = loaded_after("import sched_interval\nsched_interval.parse_interval('banana', '6h')")
    assert "logging" in loaded
    assert "asyncio" not in loaded


def test_cli_path_loads_only_what_it_uses() -> None:
    """python -m sched_interval loads no argparse, logging, typing or asyncio."""
    loaded = loaded_after(
        "import runpy\n"
        "try:\n"
        "    runpy.run_module('sched_interval', run_name='__main__', alter_sys=True)\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.modules.pop('runpy', None)\n"
        "for name in list(sys.modules):\n"
        "    if name.startswith(('importlib', 'pkgutil')):\n"
        "        sys.modules.pop(name)",
        "banana",
        "--min",
        "1m",
    )
    assert "sched_interval._cli" in loaded
    assert [] == [name for name in NEVER if name in loaded]


def test_public_classes_live_in_the_package_namespace() -> None:
    """Tracebacks, reprs and pickles name the classes where users import them from."""
    assert {"sched_interval"} == {
        cls.__module__ for cls in (DurationParseError, IntervalError, Mode, Schedule)
    }


def test_errors_subclass_value_error() -> None:
    """Every error is an IntervalError and a ValueError."""
    assert issubclass(IntervalError, ValueError)
    assert issubclass(DurationParseError, IntervalError)
