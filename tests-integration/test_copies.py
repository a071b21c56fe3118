"""Modules copied into several packages stay byte for byte equal to their one source.

The sources live in ``tools/copied/``; ``tools/copies.py`` says which packages
carry each and writes the copies (``python tools/copies.py``).
"""

from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import copies  # noqa: E402


def test_every_copy_equals_its_source() -> None:
    """Each copy listed in ``tools/copies.py`` exists and equals its source, and no
    package holds a module of a copied name that the list does not give it."""
    found = copies.differences()
    assert [] == found, "run `python tools/copies.py` to write the copies"


def test_the_check_sees_a_copy_that_drifted(tmp_path: Path) -> None:
    """A changed byte, a missing copy and an unlisted copy each fail the check."""
    packages = tmp_path / "packages"
    shutil.copytree(
        ROOT / "packages",
        packages,
        ignore=shutil.ignore_patterns("__pycache__", ".hypothesis", "tests", "*.md"),
    )
    assert [] == copies.differences(packages)
    drifted = packages / "sched-lock" / "src" / "sched_lock" / "_compat.py"
    drifted.write_bytes(drifted.read_bytes() + b"\n")
    missing = packages / "sched-cmd" / "src" / "sched_cmd" / "_stopwatch.py"
    missing.unlink()
    stray = packages / "sched-lock" / "src" / "sched_lock" / "_durations.py"
    stray.write_bytes((copies.SOURCES / "_durations.py").read_bytes())
    assert [
        f"{missing}: missing (a copy of {copies.SOURCES / '_stopwatch.py'})",
        f"{drifted}: differs from {copies.SOURCES / '_compat.py'}",
        f"{stray}: not listed in tools/copies.py COPIES['_durations.py']",
    ] == copies.differences(packages)
    assert sorted([missing, drifted]) == copies.write(packages)
    assert [f"{stray}: not listed in tools/copies.py COPIES['_durations.py']"] == (
        copies.differences(packages)
    )


def test_copied_modules_are_not_exported() -> None:
    """No package re-exports a name from a copied module: the copies stay private."""
    for init in sorted(ROOT.glob("packages/*/src/*/__init__.py")):
        tree = ast.parse(init.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module is not None:
                assert f"{node.module}.py" not in copies.COPIES, (init, node.module)


def test_every_copy_runs_its_contract_in_its_package() -> None:
    """Each copied module with contract tests has a source here, and each package that
    carries a copy of one runs the contracts on its own copies (its tests/test_copied.py
    takes ``copied_contracts`` of its own name, which finds every contract test)."""
    sys.path.insert(0, str(ROOT / "testing"))
    try:
        import sched_testing
    finally:
        sys.path.remove(str(ROOT / "testing"))
    modules = {f"{module}.py" for module in sched_testing.CONTRACTS.values()}
    assert modules <= set(copies.COPIES)
    for module in sorted(modules):
        for package in copies.COPIES[module]:
            (tests,) = ROOT.glob(f"packages/*/src/{package}/../../tests")
            text = (tests / "test_copied.py").read_text()
            assert f'globals().update(copied_contracts("{package}"))' in text, package
