"""The stand-in for a job's real command (an rsync, a pg_dump, a report build).

The example job runner runs this once per cycle through ``sched_cmd.run``
unless ``JOB_COMMAND`` names another command. It behaves as a well-mannered
worker should: on SIGTERM it cleans up and exits within the grace it is given.

Environment:
    JOB_CYCLE: the cycle number the runner gives it (for the log lines).
    WORK_SECONDS: how long the work takes (default 0.1).
    WORK_HOLD: the path of a FIFO. When set, the work lasts until a line is
        written to that FIFO instead: the demo and the tests keep a run in
        flight this way while they show what happens around it, and release
        it with a handshake rather than guessing with sleeps.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

CYCLE = os.environ.get("JOB_CYCLE", "?")


def _say(text: str) -> None:
    print(f"work: cycle {CYCLE} {text}", flush=True)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """Clean up and exit the way a shell reports death by SIGTERM (128 + 15)."""
    _say("received SIGTERM; cleaning up and exiting")
    sys.exit(128 + signum)


def main() -> int:
    """Do one cycle's work."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    _say(f"started (pid {os.getpid()})")
    hold = os.environ.get("WORK_HOLD")
    if hold:
        with Path(hold).open(encoding="utf-8") as fifo:  # blocks until someone writes
            fifo.readline()
    else:
        time.sleep(float(os.environ.get("WORK_SECONDS", "0.1")))
    _say("finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
