"""The noxfile picks interpreters that are present, and CI keeps a missing one an error.

Each test runs ``nox --list --json`` with ``PATH`` holding only this
interpreter, as ``python<X.Y>``: the machine of a newcomer with one Python.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from monorepo import ROOT, discover, pyproject

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


def nox_list(tmp_path: Path, *, ci: bool) -> tuple[list[dict[str, Any]], str]:
    """The default sessions nox would run on a machine whose only Python is this one."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    link = bin_dir / f"python{HERE}"
    if not link.exists():
        link.symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in {"CI", "PYENV_VERSION"}}
    env["PATH"] = str(bin_dir)
    if ci:
        env["CI"] = "true"
    result = subprocess.run(
        [sys.executable, "-m", "nox", "--list", "--json", "-f", str(ROOT / "noxfile.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == result.returncode, result.stderr
    return json.loads(result.stdout), result.stderr


def test_sessions_not_about_a_version_run_on_the_python_that_is_present(tmp_path: Path) -> None:
    """demo, lint, build... use the one Python there; tests name every supported version."""
    sessions, _ = nox_list(tmp_path, ci=False)
    single = {s["session"]: s["python"] for s in sessions if s["name"] != "tests"}
    assert {"demo", "lint", "typecheck", "build"} <= set(single)
    expected = "3.12" if HERE == "3.12" else HERE
    assert dict.fromkeys(single, expected) == single
    assert SUPPORTED == sorted({s["python"] for s in sessions if s["name"] == "tests"})


def test_a_local_run_ends_with_how_to_provide_the_missing_versions(tmp_path: Path) -> None:
    """One closing line names each missing version and the pyenv commands that add it."""
    _, stderr = nox_list(tmp_path, ci=False)
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"nox > Python {' and '.join(MISSING)} not found")
    assert f"pyenv install {' '.join(MISSING)}" in last
    assert f"export PYENV_VERSION={':'.join(SUPPORTED)}" in last


def test_under_ci_every_session_keeps_its_interpreter(tmp_path: Path) -> None:
    """With CI set nothing moves to another Python and nothing is excused: no closing line."""
    sessions, stderr = nox_list(tmp_path, ci=True)
    single = {s["session"]: s["python"] for s in sessions if s["name"] != "tests"}
    assert dict.fromkeys(single, "3.12") == single
    assert "not found" not in stderr
