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
    "PACKAGES_DIR",
    "ROOT",
    "RepoError",
    "discover",
    "pyproject",
    "siblings",
    "version",
]

ROOT = Path(__file__).resolve().parent.parent
PACKAGES_DIR = ROOT / "packages"


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
