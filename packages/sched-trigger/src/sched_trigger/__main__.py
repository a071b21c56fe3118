"""``sched-trigger [--timeout D] [--owner U] SOCKET [PAYLOAD_JSON | -]``: submit one run.

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

__all__ = ["format_ms", "main", "parse_owner", "parse_timeout"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNREACHABLE = 2
EXIT_LOST = 3
EXIT_INTERRUPTED = 130

_USAGE = """\
usage: sched-trigger [--timeout DURATION] [--owner USER] SOCKET [PAYLOAD_JSON | -]

Submit one run to the daemon listening on SOCKET and wait for its result.
PAYLOAD_JSON is the run's arguments as one JSON value (default: {}); with -
the payload is read from standard input (at most 8 MiB), which is the way to
pass anything large or secret (an argument is visible to every user in
/proc/PID/cmdline).

options:
  --timeout DURATION  give up after this long: seconds (30, 2.5) or a Go
                      duration (90s, 1m30s, 500ms); the run may still happen
  --owner USER        the user (name or uid) the daemon runs as, when that is
                      not you or root; a daemon of any other user is sent nothing

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
    _to_stderr(f"sched-trigger: {text}\n")


def _to_stderr(text: str) -> None:
    stream = sys.stderr
    if stream is None:  # started with standard error closed: the exit status says it all
        return
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):
        return  # a closed or broken standard error must not change the exit status


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
    owner: int | None = None
    while args and args[0].startswith("--") and args[0] != "--":
        option = args.pop(0)
        name, has_value, value = option.partition("=")
        if name not in ("--timeout", "--owner"):
            return _usage_error(f"unknown option {option}")
        if not has_value:
            if not args:
                return _usage_error(f"{name} needs a value")
            value = args.pop(0)
        try:
            if name == "--timeout":
                timeout = parse_timeout(value)
            else:
                owner = parse_owner(value)
        except ValueError as exc:
            _say(str(exc))
            return EXIT_UNREACHABLE
    if args and args[0] == "--":
        args.pop(0)
    if not args:
        return _usage_error("missing SOCKET, the daemon's socket path")
    if len(args) > 2:
        return _usage_error(f"unexpected argument {args[2]!r}")
    payload = _payload(args[1]) if len(args) == 2 else {}
    if payload is _NOT_SENT:
        return EXIT_UNREACHABLE
    return _submit(args[0], payload, timeout, owner)


def _usage_error(problem: str) -> int:
    _say(problem)
    _to_stderr(_USAGE)
    return EXIT_UNREACHABLE


def parse_owner(text: str) -> int:
    """Parse ``--owner``: a uid, or the name of a user on this machine.

    Raises:
        ValueError: *text* is neither.
    """
    if text.isdigit():
        return int(text)
    import pwd  # only for a name: a C module, cheap

    try:
        return pwd.getpwnam(text).pw_uid
    except KeyError:
        raise ValueError(f"--owner: unknown user {text!r}") from None


_NOT_SENT = object()


def _payload(argument: str) -> object:
    """The payload from PAYLOAD_JSON or standard input; `_NOT_SENT` (after saying why)."""
    import json

    if argument == "-":
        source = "standard input"
        text: str | bytes | None = _read_stdin()
        if text is None:
            return _NOT_SENT
    else:
        source, text = "PAYLOAD_JSON", argument
    try:
        return json.loads(text)
    except RecursionError:
        _say(f"{source} nests too deeply for Python's json to read; nothing was sent")
    except MemoryError:
        _say(f"{source} is too large to read into memory; nothing was sent")
    except ValueError as exc:
        _say(f"{source} is not valid JSON: {exc}")
    return _NOT_SENT


def _read_stdin() -> bytes | None:
    """Standard input, up to the daemon's request cap; None (after saying why) past it."""
    from ._wire import MAX_REQUEST_SIZE

    stream = sys.stdin
    if stream is None:
        _say("cannot read standard input: it is closed")
        return None
    try:
        data = stream.buffer.read(MAX_REQUEST_SIZE + 1)
    except OSError as exc:
        _say(f"cannot read standard input: {exc.strerror or exc}")
        return None
    if len(data) > MAX_REQUEST_SIZE:
        cap = f"{MAX_REQUEST_SIZE // (1024 * 1024)} MiB"
        _say(f"standard input is over the {cap} request cap of a daemon; nothing was sent")
        return None
    return data


def _submit(path: str, payload: object, timeout: float | None, owner: int | None) -> int:  # noqa: PLR0911 - one exit per status
    import errno

    from ._client import submit
    from ._errors import ConnectionLost, SendFailed, SubmitTimeout, Unreachable

    seen_queued = False

    def on_event(event: Event) -> None:
        nonlocal seen_queued
        seen_queued = True
        _say(event.kind)

    try:
        final = submit(path, payload, on_event, timeout=timeout, owner=owner)
    except (Unreachable, SendFailed) as exc:
        _say(f"daemon unreachable: {exc}")
        if exc.errno == errno.EPERM and isinstance(exc, Unreachable):
            _say("nothing was sent; if that user's daemon is the one you meant, pass --owner")
        return EXIT_UNREACHABLE
    except ConnectionLost as exc:
        _say(f"connection lost mid-run: {exc}")
        return EXIT_LOST
    except SubmitTimeout as exc:
        _say(f"{exc}; the run may still happen")
        return EXIT_LOST
    except (TypeError, ValueError) as exc:  # the payload, refused before connecting
        _say(f"cannot send the payload: {exc}")
        return EXIT_UNREACHABLE
    except Exception as exc:  # whatever else: the outcome is unknown
        _say(f"unexpected error: {type(exc).__name__}: {exc}; the run may still happen")
        return EXIT_LOST
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
