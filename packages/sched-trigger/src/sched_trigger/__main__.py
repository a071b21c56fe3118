"""``sched-trigger SOCKET [PAYLOAD_JSON]``: submit one run and report its result.

Exit status: 0 the run succeeded, 1 it failed or was rejected, 2 the daemon is
unreachable or the request could not be sent (or the arguments are wrong), 3
the connection was lost mid-run, 130 interrupted by Ctrl-C. The lifecycle goes
to stderr. The argument parsing is by hand: argparse alone would add more
start-up time than the whole round trip takes.
"""

from __future__ import annotations

import sys

from ._client import submit
from ._errors import ConnectionLost, SendFailed, SubmitTimeout, Unreachable
from ._wire import Event

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNREACHABLE = 2
EXIT_LOST = 3
EXIT_INTERRUPTED = 130

_USAGE = """\
usage: sched-trigger SOCKET [PAYLOAD_JSON]

Submit one run to the daemon listening on SOCKET and wait for its result.
PAYLOAD_JSON is the run's arguments as one JSON value (default: {}).

exit status: 0 succeeded, 1 failed or rejected, 2 unreachable or not sent,
3 connection lost mid-run, 130 interrupted
"""


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


def main(argv: Sequence[str] | None = None) -> int:  # noqa: PLR0911 - one exit per status
    """Run the CLI; returns the exit status (the console script exits with it)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        sys.stdout.write(_USAGE)
        return EXIT_OK
    if args and args[0] == "--":
        args.pop(0)
    if not 1 <= len(args) <= 2:
        sys.stderr.write(_USAGE)
        return EXIT_UNREACHABLE
    path = args[0]
    payload: object = {}
    if len(args) == 2:
        import json

        try:
            payload = json.loads(args[1])
        except ValueError as exc:
            _say(f"PAYLOAD_JSON is not valid JSON: {exc}")
            return EXIT_UNREACHABLE
    seen_queued = False

    def on_event(event: Event) -> None:
        nonlocal seen_queued
        seen_queued = True
        _say(event.kind)

    try:
        final = submit(path, payload, on_event)
    except KeyboardInterrupt:
        _say("interrupted; the connection was closed")
        return EXIT_INTERRUPTED
    except (Unreachable, SendFailed) as exc:
        _say(f"daemon unreachable: {exc}")
        return EXIT_UNREACHABLE
    except ConnectionLost as exc:
        _say(f"connection lost mid-run: {exc}")
        return EXIT_LOST
    except SubmitTimeout as exc:  # pragma: no cover - the CLI sets no timeout
        _say(str(exc))
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
