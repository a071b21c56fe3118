"""``python -m sched_interval``: check an interval value before deploying it.

The arguments are parsed by hand rather than with ``argparse``: a negative
value such as ``-1h`` is exactly what an operator wants to check, and
``argparse`` would take it for an option; it also keeps this path free of
every import the check does not use (no ``argparse``, ``logging`` or
``typing``).
"""

from __future__ import annotations

import sys

from ._compat import TYPE_CHECKING
from ._errors import IntervalError
from ._goduration import format_duration
from ._interval import resolve

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import TextIO

__all__ = ["main"]

USAGE = (
    "usage: python -m sched_interval VALUE"
    " [--default D] [--zero-as-once] [--min D] [--max D] [--name VAR]"
)

HELP = f"""{USAGE}

Show how a job built on sched_interval (or on the Go library) reads an
interval value: the mode, the cadence in Go duration form, and every warning
the job would log. Durations are Go duration strings ("6h", "1h30m", "90s").

arguments:
  VALUE            the raw value, exactly as the variable would hold it;
                   a value starting with '-' (such as -1h) is taken as VALUE
  --default D      the job's default cadence (default: 6h)
  --zero-as-once   a zero duration selects the once mode instead of external
  --min D          lower bound for a parsed positive cadence
  --max D          upper bound for a parsed positive cadence
  --name VAR       the variable name each warning gives (default: interval)
  -h, --help       show this help and exit

output:
  "mode: M" and "interval: D" on standard output (in the external and once
  modes D is the default, carried for reference), then each warning as
  "warning: MESSAGE" on standard error.

exit status:
  0  the value is used as given (no warning)
  1  the job would log a warning (fallback to the default, or clamped)
  2  usage error: bad arguments, or an invalid --default, --min or --max
"""

EXIT_OK = 0
EXIT_WARNED = 1
EXIT_USAGE = 2

_VALUE_OPTIONS = ("--default", "--min", "--max", "--name")


class _UsageError(Exception):
    pass


def _parse_args(argv: Sequence[str]) -> dict[str, str | bool] | None:
    """Options by name (``value``, ``--default``, ...); ``None`` asks for help."""
    options: dict[str, str | bool] = {"--default": "6h", "--name": "interval"}
    i = 0
    only_values = False
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not only_values and arg.startswith("--"):
            if arg == "--":
                only_values = True
                continue
            key, eq, inline = arg.partition("=")
            if key == "--help" and not eq:
                return None
            if key == "--zero-as-once" and not eq:
                options[key] = True
                continue
            if key not in _VALUE_OPTIONS:
                raise _UsageError(f"unknown option {arg!r}")
            if eq:
                options[key] = inline
            elif i < len(argv):
                options[key] = argv[i]
                i += 1
            else:
                raise _UsageError(f"option {key} needs a value")
            continue
        if not only_values and arg == "-h":
            return None
        if "value" in options:
            raise _UsageError(f"one VALUE expected, got a second one: {arg!r}")
        options["value"] = arg
    if "value" not in options:
        raise _UsageError("missing VALUE (pass '' to check an unset variable)")
    return options


def main(
    argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Run the CLI.

    Args:
        argv: the arguments after the program name; ``sys.argv[1:]`` by default.
        stdout: where the result goes; ``sys.stdout`` by default.
        stderr: where warnings and errors go; ``sys.stderr`` by default.

    Returns:
        The exit status: 0 no warning, 1 a warning would be logged, 2 usage error.
    """
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    try:
        options = _parse_args(sys.argv[1:] if argv is None else argv)
        if options is None:
            out.write(HELP)
            return EXIT_OK
        value = str(options["value"])
        schedule, warnings = resolve(
            value,
            str(options["--default"]),
            zero_as_once=bool(options.get("--zero-as-once", False)),
            bounds=(_opt(options, "--min"), _opt(options, "--max")),
            name=str(options["--name"]),
        )
    except (_UsageError, IntervalError) as exc:
        err.write(f"{USAGE}\nerror: {exc}\n")
        return EXIT_USAGE
    out.write(f"mode: {schedule.mode}\ninterval: {format_duration(schedule.interval)}\n")
    for warning in warnings:
        err.write(f"warning: {warning.message}\n")
    return EXIT_WARNED if warnings else EXIT_OK


def _opt(options: dict[str, str | bool], key: str) -> str | None:
    value = options.get(key)
    return None if value is None else str(value)
