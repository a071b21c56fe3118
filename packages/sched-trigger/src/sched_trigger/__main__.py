"""``sched-trigger [--timeout D] SOCKET [PAYLOAD_JSON | -]``: submit one run, report its result.

Exit status: 0 the run succeeded, 1 it failed or was rejected, 2 the daemon is
unreachable or the request could not be sent (or the arguments are wrong), 3
the connection was lost mid-run or the timeout passed first, 130 interrupted
by Ctrl-C. The lifecycle goes to stderr. The argument parsing is by hand:
argparse alone would add more start-up time than the whole round trip takes.

This module imports nothing at the top but ``sys``: everything else is
imported inside `main`, under the same Ctrl-C guard as the round trip, so an
interrupt during start-up exits 130 without a traceback.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._wire import Event

__all__ = ["format_ms", "main", "parse_timeout"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNREACHABLE = 2
EXIT_LOST = 3
EXIT_INTERRUPTED = 130

_USAGE = """\
usage: sched-trigger [--timeout DURATION] SOCKET [PAYLOAD_JSON | -]

Submit one run to the daemon listening on SOCKET and wait for its result.
PAYLOAD_JSON is the run's arguments as one JSON value (default: {}); with -
the payload is read from standard input, which is the way to pass anything
large or secret (an argument is visible to every user in /proc/PID/cmdline).

options:
  --timeout DURATION  give up after this long: seconds (30, 2.5) or a Go
                      duration (90s, 1m30s, 500ms); the run may still happen

exit status: 0 succeeded, 1 failed or rejected, 2 unreachable or not sent,
3 connection lost mid-run or timed out, 130 interrupted
"""

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_timeout(text: str) -> float:
    """Parse ``--timeout``: a number of seconds, or a Go duration such as ``1m30s``.

    Raises:
        ValueError: *text* is neither, or is negative or not finite.
    """
    try:
        seconds = float(text)
    except ValueError:
        seconds = _go_duration(text)
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"invalid timeout {text!r}")
    return seconds


def _go_duration(text: str) -> float:
    import re  # json has loaded it already by the time a timeout is parsed

    parts = re.findall(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)", text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise ValueError(f"invalid timeout {text!r}: use seconds (30) or a duration (1m30s)")
    return sum(float(number) * _UNITS[unit] for number, unit in parts)


def format_ms(ms: int) -> str:
    """Format whole milliseconds as Go's ``Duration.String`` does (``1.5s``, ``1h0m0s``)."""
    if ms == 0:
        return "0s"
    sign, ms = ("-", -ms) if ms < 0 else ("", ms)
    if ms < 1000:
        return f"{sign}{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    text = f"{seconds}.{millis:03d}".rstrip("0") if millis else str(seconds)
    if hours:
        return f"{sign}{hours}h{minutes}m{text}s"
    if minutes:
        return f"{sign}{minutes}m{text}s"
    return f"{sign}{text}s"


def _say(text: str) -> None:
    sys.stderr.write(f"sched-trigger: {text}\n")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (the console script exits with it)."""
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:
        _say("interrupted; the connection, if any, was closed")
        return EXIT_INTERRUPTED


def _main(args: list[str]) -> int:  # noqa: PLR0911 - one exit per status
    if args and args[0] in ("-h", "--help"):
        sys.stdout.write(_USAGE)
        return EXIT_OK
    timeout: float | None = None
    while args and args[0].startswith("--") and args[0] != "--":
        option = args.pop(0)
        name, _, value = option.partition("=")
        if name != "--timeout":
            _say(f"unknown option {option}")
            sys.stderr.write(_USAGE)
            return EXIT_UNREACHABLE
        if not value:
            if not args:
                _say("--timeout needs a value")
                return EXIT_UNREACHABLE
            value = args.pop(0)
        try:
            timeout = parse_timeout(value)
        except ValueError as exc:
            _say(str(exc))
            return EXIT_UNREACHABLE
    if args and args[0] == "--":
        args.pop(0)
    if not 1 <= len(args) <= 2:
        sys.stderr.write(_USAGE)
        return EXIT_UNREACHABLE
    path = args[0]
    payload: object = {}
    if len(args) == 2:
        import json

        source, text = (
            ("standard input", sys.stdin.buffer.read())
            if args[1] == "-"
            else ("PAYLOAD_JSON", args[1])
        )
        try:
            payload = json.loads(text)
        except ValueError as exc:
            _say(f"{source} is not valid JSON: {exc}")
            return EXIT_UNREACHABLE

    from ._client import submit
    from ._errors import ConnectionLost, SendFailed, SubmitTimeout, Unreachable

    seen_queued = False

    def on_event(event: Event) -> None:
        nonlocal seen_queued
        seen_queued = True
        _say(event.kind)

    try:
        final = submit(path, payload, on_event, timeout=timeout)
    except (Unreachable, SendFailed) as exc:
        _say(f"daemon unreachable: {exc}")
        return EXIT_UNREACHABLE
    except ConnectionLost as exc:
        _say(f"connection lost mid-run: {exc}")
        return EXIT_LOST
    except SubmitTimeout as exc:
        _say(f"{exc}; the run may still happen")
        return EXIT_LOST
    except (TypeError, ValueError) as exc:
        _say(f"cannot send the payload: {exc}")
        return EXIT_UNREACHABLE
    took = format_ms(final.duration_ms)
    note = f": {final.reason}" if final.reason else ""
    if final.ok:
        _say(f"done: ok in {took}{note}")
        return EXIT_OK
    if not seen_queued:
        _say(f"rejected{note}")
    else:
        _say(f"done: failed after {took}{note}")
    return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
