"""An example container job runner built on the six sched packages.

This is the Python form of the Go library's composition root: one small
program that reads its cadence from ``JOB_INTERVAL``, picks a mode, and runs
one *cycle* (a real command, through ``sched_cmd.run``) at a time, never two
at once across every process that shares its state directory, and drains on
SIGTERM. Copy it and replace the command.

Subcommands::

    python jobrunner.py run      # the container's main process: JOB_INTERVAL picks the mode
    python jobrunner.py poll     # one cycle on demand (docker exec, Ofelia): queue mode
    python jobrunner.py daemon   # variant that owns every run: ticker + unix socket -> one queue

Modes of ``run``, from ``JOB_INTERVAL`` (see the operations page):

* a positive duration (``30m``, ``1h30m``), or unset/unparseable (the default,
  6h): **built-in** -- a cycle at startup, then one every interval with +-10%
  jitter; each tick is guarded by ``Exclusive.run_or_skip``;
* ``off`` / ``disabled``: **external** -- idle until stopped; runs come from
  ``poll`` (queued through ``Exclusive.run``);
* ``0``: **once** -- one cycle, then exit. (This runner's choice, made with
  ``zero_as_once=True``: by the library's default, ``0`` means external.)

Environment:
    JOB_INTERVAL: the cadence, a Go duration, or a sentinel (above).
    JOB_COMMAND: the command a cycle runs, split like a shell would (default:
        the ``work.py`` stand-in beside this file).
    JOB_GRACE: how long the command gets between SIGTERM and SIGKILL on
        shutdown, a Go duration (default 5s).
    JOB_STATE_DIR: the directory holding ``cycle.lock`` and ``cycle.queued``
        (default ``/tmp/jobrunner``). Keep it private to the job's user.
    JOB_SOCKET: the trigger socket of the ``daemon`` variant (default
        ``JOB_STATE_DIR/trigger.sock``).
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import sched_cmd
import sched_exclusive as exclusive
from sched_interval import Mode, Schedule, format_duration, interval_from_env, parse_duration
from sched_loop import run_loop, stop_on_signals

if TYPE_CHECKING:
    import sched_trigger as trigger

log = logging.getLogger("jobrunner")

DEFAULT_INTERVAL = timedelta(hours=6)
JITTER = 0.10


# --- logging: the app's job, never the library's ---------------------------


class KeyValueFormatter(logging.Formatter):
    """The default text format, followed by the record's structured fields.

    The sched packages put the key facts in the message and the same facts,
    typed, in ``extra`` fields (``dir``, ``pending``, ``sched_reason``...;
    ``app_`` ones are ours). A JSON formatter would emit them as keys; this
    one appends ``key=value`` pairs.
    """

    #: The attributes every record has: any other one came from ``extra``.
    STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        """Format the record, then append its ``extra`` fields."""
        line = super().format(record)
        fields = {key: value for key, value in vars(record).items() if key not in self.STANDARD}
        if fields:
            line += " " + " ".join(f"{key}={value}" for key, value in sorted(fields.items()))
        return line


def quiet_logger() -> logging.Logger:
    """A logger that drops every record: for reading ``JOB_INTERVAL`` again after startup.

    The resident process logs a bad value once, when it starts; a ``poll``
    (or a health probe) that re-reads the variable passes this logger so the
    warning is not repeated on every call. It stops propagation and has a
    ``NullHandler``, so neither the root handlers nor ``logging.lastResort``
    see a record.
    """
    quiet = logging.getLogger("jobrunner.quiet")
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    return quiet


def configure_logging() -> None:
    """Send every record, ours and the libraries', to stderr, one line each."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        KeyValueFormatter(f"jobrunner[{os.getpid()}] %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


# --- configuration ----------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """Everything the runner reads from its environment, read once at startup."""

    schedule: Schedule
    command: list[str]
    grace: timedelta
    state_dir: Path
    socket: Path

    @classmethod
    def from_env(
        cls, env: dict[str, str] | None = None, *, interval_logger: logging.Logger | None = None
    ) -> Config:
        """Read the configuration; warnings about ``JOB_INTERVAL`` go to *interval_logger*
        (by default the ``sched_interval`` logger)."""
        env = dict(os.environ if env is None else env)
        default_command = [sys.executable, str(Path(__file__).with_name("work.py"))]
        state_dir = Path(env.get("JOB_STATE_DIR", "/tmp/jobrunner"))
        grace_ns = parse_duration(env.get("JOB_GRACE", "5s"))
        return cls(
            # zero_as_once: this job supports a run-once mode ("0"), as a batch
            # job would; "off"/"disabled" still select external mode.
            schedule=interval_from_env(
                "JOB_INTERVAL",
                DEFAULT_INTERVAL,
                zero_as_once=True,
                environ=env,
                logger=interval_logger,
            ),
            command=shlex.split(env["JOB_COMMAND"]) if "JOB_COMMAND" in env else default_command,
            grace=timedelta(microseconds=grace_ns // 1000) or sched_cmd.DEFAULT_GRACE,
            state_dir=state_dir,
            socket=Path(env.get("JOB_SOCKET", str(state_dir / "trigger.sock"))),
        )


class CycleFailed(Exception):
    """The cycle's command exited non-zero."""


class CycleStopped(CycleFailed):
    """The cycle's command exited non-zero after a stop was requested: a drain, not a fault."""


_cycle_numbers = itertools.count(1)


def run_cycle(
    config: Config, stop: threading.Event, why: str, env: dict[str, str] | None = None
) -> None:
    """Run one cycle: the real command, stopped gracefully if *stop* is set.

    Raises:
        CycleStopped: the command exited non-zero because *stop* stopped it.
        CycleFailed: the command exited non-zero otherwise.
    """
    number = next(_cycle_numbers)
    log.info("cycle %d starting (%s)", number, why, extra={"app_cycle": number})
    result = sched_cmd.run(
        config.command,
        stop=stop,
        grace=config.grace,
        # JOB_COMMAND may be a shell (sh -c "..."): SIGTERM must reach what it started.
        kill_group=True,
        env={**os.environ, **(env or {}), "JOB_CYCLE": str(number)},
    )
    log.info(
        "cycle %d command exited with status %d",
        number,
        result.returncode,
        extra={"app_cycle": number, "app_returncode": result.returncode},
    )
    if result.returncode != 0:
        if result.stopped:  # the library stopped it: a drain (stop.is_set() would race)
            raise CycleStopped(
                f"cycle {number}: stopped by shutdown, command exited with status "
                f"{result.returncode}"
            )
        raise CycleFailed(f"cycle {number}: command exited with status {result.returncode}")


def cycle_job(
    config: Config, stop: threading.Event, why: str, env: dict[str, str] | None = None
) -> Callable[[], None]:
    """The argument-less job ``Exclusive`` runs: the first call, then each queued rerun."""
    calls = itertools.count()

    def job() -> None:
        run_cycle(config, stop, why if next(calls) == 0 else "queued rerun", env)

    return job


def cycle_guard(config: Config, stop: threading.Event) -> exclusive.Exclusive | None:
    """The cross-process guard: one cycle at a time, no fresh run after a stop.

    The state directory is made here (mode 0700) if it is missing; ``Exclusive``
    itself never creates one. ``None``, logged as a failed cycle with outcome
    ``none``, when the directory cannot be made or used.
    """
    try:
        config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        return exclusive.Exclusive(config.state_dir, gate=lambda: not stop.is_set())
    except OSError as exc:  # a file in the way, a read-only mount, no permission...
        none = exclusive.Outcome.NONE
        log.error("cycle failed: state directory unusable: %s", exc, extra={"app_outcome": none})
        return None


def guarded(
    call: Callable[[], exclusive.Outcome],
) -> tuple[exclusive.Outcome, exclusive.ExclusiveError | None]:
    """Run an ``Exclusive`` call; log its outcome, or its failure and carry on.

    The outcome is never lost: a failure carries it (``ran`` when the job ran
    and failed, ``none`` when the lock directory was unusable, ``queued`` when
    the request was recorded but the re-check after it failed). ``str()`` of
    the error names its cause (for a ``RunError``, the job's own exception).
    """
    try:
        outcome = call()
    except exclusive.ExclusiveError as exc:
        causes = getattr(exc, "exceptions", [exc])
        if all(isinstance(cause, CycleStopped) for cause in causes):
            # SIGTERM ended the cycle: that is the drain working, not a fault.
            log.info("%s (outcome %s)", causes[0], exc.outcome, extra={"app_outcome": exc.outcome})
        else:
            log.error("cycle failed: %s", exc, extra={"app_outcome": exc.outcome})
        return exc.outcome, exc
    log.info("cycle outcome: %s", outcome, extra={"app_outcome": outcome})
    return outcome, None


# --- the entry points ---------------------------------------------------------


def main_run(config: Config) -> int:
    """The container's main process: the mode comes from ``JOB_INTERVAL``."""
    schedule = config.schedule
    with stop_on_signals() as stop:
        ex = cycle_guard(config, stop)
        if ex is None:
            return 1
        if schedule.mode is Mode.BUILTIN:
            log.info(
                "built-in mode: a cycle now, then every %s (+-%d%% jitter)",
                format_duration(schedule.interval),
                round(JITTER * 100),
            )
            fires = itertools.count()

            def tick(stop: threading.Event) -> None:
                why = "startup run" if next(fires) == 0 else "tick"
                # Skip mode: a busy lock means a cycle is already running; the
                # next tick brings freshness. Never queue a tick.
                guarded(lambda: ex.run_or_skip(cycle_job(config, stop, why)))

            run_loop(tick, schedule.interval, jitter=JITTER, fire_on_start=True, stop=stop)
        elif schedule.mode is Mode.EXTERNAL:
            log.info("external mode: idle; cycles come from `jobrunner.py poll`")
            stop.wait()
        else:  # Mode.ONCE: JOB_INTERVAL=0, because Config passes zero_as_once=True
            log.info("once mode: one cycle, then exit")
            _, error = guarded(lambda: ex.run_or_skip(cycle_job(config, stop, "once")))
            return 1 if error else 0
    log.info("stopped: no cycle in flight, exiting")
    return 0


def main_poll(config: Config) -> int:
    """One cycle on demand, satisfied by a run that starts after the request arrived.

    Queue mode: if a cycle is running (in the resident process or another
    poll), the request is recorded and this process exits at once; the
    running holder executes it when its cycle ends. The exit status is the
    poll's own result: a failed rerun it served for another request is
    logged, not counted.
    """
    with stop_on_signals() as stop:
        ex = cycle_guard(config, stop)
        if ex is None:
            print(f"poll: {exclusive.Outcome.NONE}", flush=True)
            return 1
        outcome, error = guarded(lambda: ex.run(cycle_job(config, stop, "poll")))
    print(f"poll: {outcome}", flush=True)
    if isinstance(error, exclusive.RunError) and outcome is not exclusive.Outcome.GATED:
        # The poll's own run is the one it answers for: the reruns it served
        # were other requests' (guarded has logged their failures).
        return 1 if error.own is not None else 0
    # queued and discarded are success: the running cycle covers this request
    # (and a queued request whose re-check failed still stands).
    return 1 if error and outcome is not exclusive.Outcome.QUEUED else 0


# --- the daemon variant: it owns every run ------------------------------------


@dataclass
class Request:
    """The arguments a trigger may send (``sched-trigger SOCKET '{"note": "..."}'``).

    Unknown fields are ignored and missing ones take these defaults, so an
    older or newer client still gets its run. Payloads are never logged: a
    forwarded field can carry a secret.
    """

    note: str = ""


#: How an ``Exclusive`` outcome reads as a trigger's result.
RESULT_NOTES = {
    exclusive.Outcome.RAN: "",
    exclusive.Outcome.RAN_QUEUED: "ran-queued: also served requests queued meanwhile",
    exclusive.Outcome.QUEUED: "queued: the cycle running in another process will serve it",
    exclusive.Outcome.DISCARDED: "discarded: a rerun already queued covers it",
    exclusive.Outcome.SKIPPED: "skipped: lock held by another process",
}


def cannot_start(error: exclusive.ExclusiveError) -> bool:
    """Whether the cycle's command could not even be started (nothing runnable there)."""
    group = error if isinstance(error, ExceptionGroup) else None
    return group is not None and group.subgroup((FileNotFoundError, PermissionError)) is not None


def main_daemon(config: Config) -> int:
    """Own every run: a ticker and a unix socket submit to one queue, one executor runs them.

    Each run is still guarded by ``Exclusive``, so a ``poll`` exec'd next to
    the daemon and the daemon's own runs never overlap: ticks use skip mode,
    socket triggers queue mode. The daemon has one stop event: SIGTERM sets
    it, and so does the broker if it dies; either way the daemon winds down,
    and it exits non-zero if the broker died.
    """
    import sched_trigger as trigger  # only the daemon needs it

    with stop_on_signals() as stop:
        ex = cycle_guard(config, stop)
        if ex is None:
            return 1
        ticks = itertools.count()

        def run(stop: threading.Event, source: str, request: Request) -> trigger.Outcome:
            # `stop` is the daemon's own event (shared with the broker): SIGTERM
            # reaches the run in flight at once, and no queued run starts after it.
            if stop.is_set():
                return trigger.Outcome(False, trigger.CANCELLED_REASON)
            began = time.monotonic()
            why = "trigger" if source == trigger.TRIGGER_EXTERNAL else source
            job = cycle_job(config, stop, why, {"JOB_NOTE": request.note})
            if source == trigger.TRIGGER_EXTERNAL:
                outcome, error = guarded(lambda: ex.run(job))
            else:
                outcome, error = guarded(lambda: ex.run_or_skip(job))
            if error is not None and cannot_start(error):
                # JOB_COMMAND names nothing runnable: every later cycle would fail the
                # same way. End the broker with it (this run's client gets "panic: ...");
                # the broker sets `stop` and the daemon exits non-zero.
                raise error
            elapsed = time.monotonic() - began
            if error is not None and outcome is not exclusive.Outcome.QUEUED:
                result = trigger.Outcome(False, str(error), elapsed)
            elif outcome is exclusive.Outcome.GATED:
                result = trigger.Outcome(False, trigger.CANCELLED_REASON, elapsed)
            else:
                result = trigger.Outcome(True, RESULT_NOTES[outcome], elapsed)
            log.info(
                "%s: done, %s%s",
                why,
                "ok" if result.ok else "failed",
                f" ({result.reason})" if result.reason else "",
                extra={"app_trigger": source, "app_ok": result.ok},
            )
            return result

        broker = trigger.run_broker_in_thread(
            config.socket, run, capacity=16, payload_type=Request, stop=stop
        )
        log.info("listening for triggers on %s", config.socket)
        try:

            def tick(_: threading.Event) -> None:
                name = "startup run" if next(ticks) == 0 else "tick"
                try:
                    job = broker.submit(Request(), trigger=name)
                except trigger.QueueFull:
                    log.warning("run queue is full; skipping this %s", name)
                    return
                job.result()  # the interval is the gap after this run ends

            if config.schedule.mode is Mode.BUILTIN:
                run_loop(
                    tick, config.schedule.interval, jitter=JITTER, fire_on_start=True, stop=stop
                )
            else:
                stop.wait()  # external: only triggers run cycles (or the broker died)
        finally:
            failure = stop_broker(broker)
    if failure is not None:
        log.error("trigger broker died: %s: %s; exiting", type(failure).__name__, failure)
        return 1
    log.info("stopped: every accepted trigger has its result, exiting")
    return 0


def stop_broker(broker: trigger.BrokerThread[Request]) -> BaseException | None:
    """Stop accepting, close the queue, drain, answer everyone; what killed the broker, if any."""
    try:
        broker.stop()
    except Exception as exc:  # the broker died: its run's exception
        return exc
    return None


def main(argv: list[str] | None = None) -> int:
    """Parse the subcommand, configure logging, and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["run", "poll", "daemon"])
    args = parser.parse_args(argv)
    configure_logging()
    if args.command == "poll":
        # The resident process warned about JOB_INTERVAL when it started.
        return main_poll(Config.from_env(interval_logger=quiet_logger()))
    config = Config.from_env()
    if args.command == "daemon":
        return main_daemon(config)
    return main_run(config)


if __name__ == "__main__":
    sys.exit(main())
