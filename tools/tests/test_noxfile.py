"""The noxfile picks interpreters that are present, and CI keeps a missing one an error.

Each test runs nox with ``PATH`` holding only this interpreter, as
``python<X.Y>``: the machine of a newcomer with one Python.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from monorepo import ROOT, discover, pyproject, tool_requirements

HERE = f"{sys.version_info.major}.{sys.version_info.minor}"
SUPPORTED = sorted(
    {
        classifier.rsplit(" ", 1)[1]
        for folder in discover().values()
        for classifier in pyproject(folder)["project"]["classifiers"]
        if classifier.startswith("Programming Language :: Python :: 3.")
    }
)
MISSING = [v for v in SUPPORTED if v != HERE]


def nox(tmp_path: Path, *args: str, ci: bool) -> subprocess.CompletedProcess[str]:
    """Run nox with *args* on a machine whose only Python is this one."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    link = bin_dir / f"python{HERE}"
    if not link.exists():
        link.symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in {"CI", "PYENV_VERSION"}}
    env["PATH"] = str(bin_dir)
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "nox", *args, "-f", str(ROOT / "noxfile.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def nox_list(tmp_path: Path, *, ci: bool) -> tuple[list[dict[str, Any]], str]:
    """The sessions nox would run on a machine whose only Python is this one."""
    result = nox(tmp_path, "--list", "--json", ci=ci)
    assert 0 == result.returncode, result.stderr
    return json.loads(result.stdout), result.stderr


def test_sessions_not_about_a_version_run_on_the_python_that_is_present(tmp_path: Path) -> None:
    """lint, build, docs... use the one Python there; tests name every supported version."""
    sessions, _ = nox_list(tmp_path, ci=False)
    single = {s["session"]: s["python"] for s in sessions if s["name"] != "tests"}
    assert {"lint", "typecheck", "build", "docs", "coverage"} <= set(single)
    expected = "3.12" if HERE == "3.12" else HERE
    assert dict.fromkeys(single, expected) == single
    assert SUPPORTED == sorted({s["python"] for s in sessions if s["name"] == "tests"})


def test_a_run_that_skips_a_missing_version_ends_with_one_note(tmp_path: Path) -> None:
    """Asked for test sessions of missing versions, nox skips each and the run ends with
    one note, the PYENV_VERSION export first; nox's per-session CI warning is gone."""
    asked = [f"tests-{version}(sched_lock)" for version in MISSING]
    # virtualenv finds interpreters on PATH only (uv would find others elsewhere).
    result = nox(tmp_path, "--force-venv-backend", "virtualenv", "-s", *asked, ci=False)
    assert 0 == result.returncode, result.stderr
    assert "Missing interpreters will error" not in result.stderr
    notes = [line for line in result.stderr.splitlines() if "not found:" in line]
    assert [result.stderr.strip().splitlines()[-1]] == notes
    (note,) = notes
    assert note.startswith(f"nox > Python {' and '.join(MISSING)} not found")
    export = note.index(f"`export PYENV_VERSION={':'.join(SUPPORTED)}`")
    assert export < note.index(f"`pyenv install {' '.join(MISSING)}`")


def test_a_run_that_skips_nothing_has_no_note(tmp_path: Path) -> None:
    """No session skipped for a missing interpreter (here, none run): no note."""
    _, stderr = nox_list(tmp_path, ci=False)
    assert "not found" not in stderr


def test_under_ci_every_session_keeps_its_interpreter(tmp_path: Path) -> None:
    """With CI set nothing moves to another Python and nothing is excused: no closing line."""
    sessions, stderr = nox_list(tmp_path, ci=True)
    single = {s["session"]: s["python"] for s in sessions if s["name"] != "tests"}
    assert dict.fromkeys(single, "3.12") == single
    assert "not found" not in stderr


def test_every_tool_is_pinned() -> None:
    """constraints.txt pins every third-party requirement a session installs: a tool
    added without `nox -s lock` fails here, not at a tool's next release."""
    pinned = {
        canonicalize_name(line.split("==", 1)[0])
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    wanted = {canonicalize_name(Requirement(r).name) for r in tool_requirements()}
    assert set() == wanted - pinned
