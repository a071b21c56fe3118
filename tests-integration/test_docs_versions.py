"""No version marker names a release its package has not reached.

Every distribution is at its ``pyproject.toml`` version; a ``versionadded``
or ``versionchanged`` marker above it ("Changed in version 0.2.0" in a
package at 0.1.0) describes a release that does not exist. The docs build
refuses one (``docs/_ext/sched_versions.py``, a warning under ``-W``); this
test holds every docstring and page to the same rule without building.
"""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PACKAGES = sorted(p.parent for p in (ROOT / "packages").glob("*/pyproject.toml"))


def _load_checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "sched_versions", DOCS / "_ext" / "sched_versions.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHECKER = _load_checker()


def version_of(package: Path) -> str:
    """The version a distribution's ``pyproject.toml`` declares."""
    with (package / "pyproject.toml").open("rb") as f:
        version: str = tomllib.load(f)["project"]["version"]
    return version


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_no_docstring_marks_a_version_above_its_package(package: Path) -> None:
    """Every marker in a package's sources names its version or an earlier one."""
    version = version_of(package)
    found = [
        f"{path.relative_to(ROOT)}: {marker}"
        for path in sorted((package / "src").rglob("*.py"))
        for marker in CHECKER.markers_above(path.read_text(encoding="utf-8"), version)
    ]
    assert [] == found, (
        f"{package.name} is at {version}: remove these markers (or bump the version first)"
    )


def test_no_page_marks_a_version_above_every_package() -> None:
    """A page's markers name a version some package has reached (its own, for a package page)."""
    versions = {package.name: version_of(package) for package in PACKAGES}
    newest = max(versions.values(), key=CHECKER.release)
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        if "_build" in page.parts:
            continue
        version = versions.get(page.stem, newest) if page.parent.name == "packages" else newest
        found += [
            f"{page.relative_to(ROOT)}: {m}"
            for m in CHECKER.markers_above(page.read_text(encoding="utf-8"), version)
        ]
    assert [] == found


@pytest.mark.parametrize(
    ("text", "above"),
    [
        (".. versionadded:: 0.2.0", ["versionadded 0.2.0"]),
        ("   .. versionchanged:: 0.1.1\n      The *stop* parameter.", ["versionchanged 0.1.1"]),
        (".. deprecated:: 1.0", ["deprecated 1.0"]),
        ("```{versionadded} 0.2.0\nNew.\n```", ["versionadded 0.2.0"]),
        (":::{versionchanged} 0.3\n:::", ["versionchanged 0.3"]),
        (".. versionadded:: 0.1.0", []),
        (".. versionadded:: 0.1", []),
        (".. versionchanged:: 0.0.9", []),
        ("Changed in version 0.2.0 (prose, not a marker)", []),
    ],
)
def test_the_check_finds_markers_above_the_version(text: str, above: list[str]) -> None:
    """The check the build runs: against 0.1.0, only a later release is refused."""
    assert above == CHECKER.markers_above(text, "0.1.0")
