"""The public surface: exports, final classes, outcome strings, errors, arguments."""

from __future__ import annotations

import errno
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import sched_exclusive
from sched_exclusive import CoordinationError, Exclusive, ExclusiveError, Outcome, RunError


def test_outcome_strings_are_the_go_names() -> None:
    """Outcomes print as the Go library's ``Outcome.String`` names."""
    expected = ["none", "ran", "ran-queued", "queued", "discarded", "skipped", "gated"]
    assert expected == [str(o) for o in Outcome]
    assert Outcome.RAN_QUEUED is Outcome("ran-queued")
    assert "outcome: ran" == f"outcome: {Outcome.RAN}"


def test_file_names_are_the_go_names() -> None:
    """The two files are named as in the Go library."""
    assert ("cycle.lock", "cycle.queued") == (sched_exclusive.LOCK_NAME, sched_exclusive.QUEUE_NAME)


def test_paths_and_repr(tmp_path: Path) -> None:
    """The instance tells its directory, file paths and capacity."""
    ex = Exclusive(tmp_path, queue_capacity=2)
    assert (str(tmp_path), str(tmp_path / "cycle.lock"), str(tmp_path / "cycle.queued")) == (
        ex.dir,
        ex.lock_path,
        ex.queue_path,
    )
    assert f"Exclusive({str(tmp_path)!r}, queue_capacity=2)" == repr(ex)
    assert str(tmp_path) == ex.location
    assert f"{tmp_path}/cycle.lock" == Exclusive(f"{tmp_path}/").lock_path


def test_both_kinds_tell_their_location() -> None:
    """``location`` reads well for either kind: a PostgreSQL instance names its job (never
    the conninfo, which may hold a password); its directory attributes say where to look."""
    pytest.importorskip("psycopg")
    ex = Exclusive.postgres("password=secret", "nightly backup")
    assert "postgresql job 'nightly backup'" == ex.location
    with pytest.raises(AttributeError, match=r"no directory \(\.location names"):
        _ = ex.dir


@pytest.mark.parametrize(
    ("where", "number", "why"),
    [
        ("missing", errno.ENOENT, "does not exist"),
        ("file/state", errno.ENOTDIR, "cannot be used: Not a directory"),
        ("file", errno.ENOTDIR, "is not a directory"),
    ],
)
def test_a_directory_that_is_not_there_is_refused_at_construction(
    tmp_path: Path, where: str, number: int, why: str
) -> None:
    """``Exclusive(dir)`` refuses a missing directory (or a file) at once, naming it; it
    never creates one."""
    (tmp_path / "file").write_text("")
    with pytest.raises(CoordinationError) as info:
        Exclusive(tmp_path / where)
    path = str(tmp_path / where)
    error = info.value
    assert (number, path, Outcome.NONE) == (error.errno, error.filename, error.outcome)
    assert f"[Errno {number}] Exclusive's directory {why}: {path!r}" == str(info.value)
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("capacity", [1.0, "2", True, None])
def test_capacity_must_be_an_int(tmp_path: Path, capacity: object) -> None:
    """A capacity that is not an int (bool included) is a TypeError."""
    with pytest.raises(TypeError, match="queue_capacity"):
        Exclusive(tmp_path, queue_capacity=capacity)  # type: ignore[arg-type]


def test_gate_must_be_callable(tmp_path: Path) -> None:
    """A gate that cannot be called is a TypeError at construction."""
    with pytest.raises(TypeError, match="gate"):
        Exclusive(tmp_path, gate=True)  # type: ignore[arg-type]


def test_errors_subclass_the_builtins_they_mean() -> None:
    """RunError is an ExceptionGroup, CoordinationError an OSError; both are ExclusiveErrors."""
    assert issubclass(RunError, ExceptionGroup)
    assert issubclass(RunError, ExclusiveError)
    assert issubclass(CoordinationError, OSError)
    assert issubclass(CoordinationError, ExclusiveError)


def test_run_error_keeps_its_outcome_through_except_star() -> None:
    """``except*`` subgroups are RunErrors with the same outcome."""
    group = RunError("cycle run failed", [ValueError("a"), KeyError("b")], Outcome.RAN_QUEUED)
    seen: list[tuple[type[BaseException], BaseExceptionGroup[Exception]]] = []
    try:
        raise group
    except* ValueError as values:
        seen.append((ValueError, values))
    except* KeyError as keys:
        seen.append((KeyError, keys))
    assert [
        (ValueError, RunError, Outcome.RAN_QUEUED, 1),
        (KeyError, RunError, Outcome.RAN_QUEUED, 1),
    ] == [
        (kind, type(sub), getattr(sub, "outcome", None), len(sub.exceptions)) for kind, sub in seen
    ]


def test_run_error_attempts_follow_their_exceptions() -> None:
    """Each exception keeps its attempt ordinal (0 the call's own run, n the n-th rerun,
    None for the gate, lock or counter) through ``except*``, ``split`` and pickling, and
    ``own`` is the own run's exception."""
    own, rerun, counter = ValueError("own"), KeyError("rerun"), OSError(5, "counter")
    group = RunError("cycle run failed", [own, rerun, counter], Outcome.RAN_QUEUED, [0, 1, None])
    assert ((0, 1, None), own) == (group.attempts, group.own)
    values, rest = group.split(ValueError)
    assert isinstance(values, RunError)
    assert isinstance(rest, RunError)
    assert ((0,), own) == (values.attempts, values.own)
    assert ((1, None), None) == (rest.attempts, rest.own)
    copy = pickle.loads(pickle.dumps(group))
    assert ((0, 1, None), "own") == (copy.attempts, str(copy.own))
    seen: list[tuple[int | None, ...]] = []
    try:
        raise group
    except* KeyError as keys:
        seen.append(getattr(keys, "attempts", ()))
    except* Exception as others:
        seen.append(getattr(others, "attempts", ()))
    assert [(1,), (0, None)] == seen


def test_run_error_attempts_default_and_check() -> None:
    """Without ordinals every attempt is unknown (None) and nothing is the own run's;
    ordinals that do not match the exceptions one for one are refused."""
    group = RunError("cycle run failed", [ValueError("a")], Outcome.RAN)
    assert ((None,), None) == (group.attempts, group.own)
    with pytest.raises(ValueError, match="one attempt per exception"):
        RunError("cycle run failed", [ValueError("a")], Outcome.RAN, [0, 1])


def test_errors_pickle_with_their_outcome() -> None:
    """Both errors survive pickling with their outcome and details."""
    group = RunError("cycle run failed", [ValueError("a")], Outcome.RAN)
    copy = pickle.loads(pickle.dumps(group))
    assert (RunError, "cycle run failed", Outcome.RAN) == (type(copy), copy.message, copy.outcome)
    assert ["a"] == [str(e) for e in copy.exceptions]
    error = CoordinationError.from_os_error(
        FileNotFoundError(2, "No such file or directory", "/d/cycle.lock"), Outcome.QUEUED
    )
    copy2 = pickle.loads(pickle.dumps(error))
    assert (2, "/d/cycle.lock", Outcome.QUEUED) == (copy2.errno, copy2.filename, copy2.outcome)
    assert str(error) == str(copy2)


def test_a_failed_run_names_its_cause(tmp_path: Path) -> None:
    """``str()`` of the RunError a failed job raises names the job's exception and its text,
    so that ``log.error("cycle failed: %s", exc)`` shows why."""

    def job() -> None:
        raise RuntimeError("command exited -15")

    with pytest.raises(RunError) as info:
        Exclusive(tmp_path).run(job)
    assert "cycle run failed (outcome ran): RuntimeError: command exited -15" == str(info.value)


@pytest.mark.parametrize(
    ("exceptions", "shown"),
    [
        ([KeyError("k"), OSError(5, "io")], "m: KeyError: 'k' (and 1 more)"),
        ([ValueError(), ValueError(), ValueError()], "m: ValueError (and 2 more)"),
        (
            [ExceptionGroup("job's own", [TimeoutError("slow"), ValueError("v")])],
            "m: ExceptionGroup: job's own: TimeoutError: slow (and 1 more)",
        ),
    ],
)
def test_run_error_text_is_its_first_cause_and_a_count(
    exceptions: list[Exception], shown: str
) -> None:
    """The first exception's type and text (its own first one, for a group), then how many
    more; a subgroup of ``except*`` and a pickled copy read the same way."""
    group = RunError("m", exceptions, Outcome.RAN_QUEUED)
    assert shown == str(group)
    assert shown == str(pickle.loads(pickle.dumps(group)))
    first, _ = group.split(type(exceptions[0]))
    assert first is not None
    assert str(first).startswith(f"m: {type(exceptions[0]).__name__}")


def test_coordination_error_without_errno() -> None:
    """An OSError without errno still converts, keeping its text."""
    error = CoordinationError.from_os_error(OSError("odd failure"), Outcome.NONE)
    assert ("odd failure", Outcome.NONE) == (str(error), error.outcome)


def test_the_import_loads_no_driver() -> None:
    """``import sched_exclusive`` loads neither psycopg nor anything the backend needs."""
    code = (
        "import sys, sched_exclusive; "
        "print(sorted(m for m in ('psycopg', 'asyncio', 'hashlib', 'socket', 'selectors', "
        "'concurrent.futures', 'sched_exclusive._postgres', 'sched_exclusive._durations') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, check=True)
    assert b"[]\n" == out.stdout
