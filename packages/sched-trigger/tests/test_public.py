"""The public surface: exports, finality, errors, version, and what the client path imports."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest
from sched_trigger_testkit import DEADLINE

from sched_trigger import (
    AlreadyServing,
    ConnectionLost,
    NotASocket,
    QueueClosed,
    QueueFull,
    SendFailed,
    SubmitCancelled,
    SubmitTimeout,
    TriggerError,
    Unreachable,
)

#: Modules the client path must never load: a docker exec'd CLI pays every import.
HEAVY = {
    "asyncio",
    "dataclasses",
    "argparse",
    "typing",
    "logging",
    "threading",
    "inspect",
    "datetime",
}


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (QueueFull(), None),
        (QueueClosed(), None),
        (Unreachable(2, "No such file", "/x"), ConnectionError),
        (SendFailed(32, "Broken pipe", "/x"), ConnectionError),
        (ConnectionLost(104, "reset", "/x"), ConnectionError),
        (SubmitTimeout("late"), TimeoutError),
        (SubmitCancelled("stopped"), None),
        (AlreadyServing(98, "already serving", "/x"), OSError),
        (NotASocket(17, "not a socket", "/x"), OSError),
    ],
)
def test_errors_share_one_base_and_the_builtin_they_mean(
    error: TriggerError, builtin: type[BaseException] | None
) -> None:
    """Each error is a TriggerError, also the builtin it means, and pickles intact."""
    assert isinstance(error, TriggerError)
    if builtin is not None:
        assert isinstance(error, builtin)
    copy = pickle.loads(pickle.dumps(error))
    assert (type(error), str(error)) == (type(copy), str(copy))


def loaded_by(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running *code*."""
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            f"{code}\nimport sys, json; print(json.dumps(list(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=True,
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_the_client_path_loads_no_asyncio() -> None:
    """``from sched_trigger import submit`` loads only the client modules: no asyncio,
    dataclasses, argparse, typing, logging or threading."""
    modules = loaded_by("from sched_trigger import submit, Event, TriggerError")
    assert set() == HEAVY & modules
    assert {
        "sched_trigger",
        "sched_trigger._client",
        "sched_trigger._compat",
        "sched_trigger._errors",
        "sched_trigger._wire",
    } == {m for m in modules if m.startswith("sched_trigger")}


def test_the_cli_loads_no_more_than_the_client() -> None:
    """The console script's module adds nothing heavy to the client path; importing it
    loads nothing but itself (its imports happen inside main, under its Ctrl-C guard)."""
    assert {"sched_trigger", "sched_trigger.__main__"} == {
        m for m in loaded_by("import sched_trigger.__main__") if m.startswith("sched_trigger")
    }
    modules = loaded_by(
        "import sched_trigger.__main__ as m; m.main(['--timeout', '1s', '/nowhere.sock'])"
    )
    assert set() == HEAVY & modules
    assert {m for m in modules if m.startswith("sched_trigger")} == {
        "sched_trigger",
        "sched_trigger.__main__",
        "sched_trigger._client",
        "sched_trigger._compat",
        "sched_trigger._errors",
        "sched_trigger._wire",
    }


def test_the_daemon_side_loads_lazily() -> None:
    """Touching a daemon-side name loads it on first use."""
    modules = loaded_by("import sched_trigger; sched_trigger.Server")
    assert "asyncio" in modules
    assert "sched_trigger._server" in modules
