"""The six distributions installed side by side: no conflict, nothing missing.

The equivalent of ``pip check`` for our six, through ``importlib.metadata``:
every requirement each one declares is installed at a version it accepts, no
two ship the same file, and each import name belongs to exactly one of them.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
KNOWN = {
    "sched-interval": "sched_interval",
    "sched-loop": "sched_loop",
    "sched-lock": "sched_lock",
    "sched-exclusive": "sched_exclusive",
    "sched-cmd": "sched_cmd",
    "sched-trigger": "sched_trigger",
}
#: The distributions in the tree; all six once every package has landed.
IN_TREE = sorted(p.parent.name for p in (ROOT / "packages").glob("*/pyproject.toml"))
DISTRIBUTIONS = {dist: KNOWN[dist] for dist in IN_TREE if dist in KNOWN}
#: Marker values of this interpreter, with no extra selected (optional extras are not checked).
ENVIRONMENT: dict[str, str] = {**{k: str(v) for k, v in default_environment().items()}, "extra": ""}


def test_every_package_folder_is_one_of_the_six() -> None:
    """The tree holds exactly the six distributions this suite knows."""
    assert sorted(KNOWN) == IN_TREE


@pytest.mark.parametrize("dist", sorted(DISTRIBUTIONS))
def test_requirements_are_satisfied(dist: str) -> None:
    """Each declared runtime requirement is installed at an accepted version (pip check)."""
    unmet = []
    for spec in metadata.requires(dist) or []:
        req = Requirement(spec)
        if req.marker is not None and not req.marker.evaluate(ENVIRONMENT):
            continue  # an optional extra ([uvloop]) or another platform
        try:
            installed = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            unmet.append(f"{spec}: not installed")
            continue
        if not req.specifier.contains(installed, prereleases=True):
            unmet.append(f"{spec}: {installed} installed")
    assert [] == unmet


@pytest.mark.parametrize("dist", sorted(DISTRIBUTIONS))
def test_runtime_dependencies_are_only_siblings(dist: str) -> None:
    """Runtime requirements are the standard library and sibling packages only."""
    foreign = [
        spec
        for spec in metadata.requires(dist) or []
        if (req := Requirement(spec)).marker is None or req.marker.evaluate(ENVIRONMENT)
        if canonicalize_name(req.name) not in DISTRIBUTIONS
    ]
    assert [] == foreign


@pytest.mark.parametrize("dist", sorted(DISTRIBUTIONS))
def test_import_name_resolves_to_its_distribution(dist: str) -> None:
    """The import name loads the code its own distribution installed.

    From a wheel, the module file is one of the distribution's files; from an
    editable install (the nox sessions), it is under the package's own
    ``src`` folder.
    """
    module = importlib.import_module(DISTRIBUTIONS[dist])
    assert module.__file__ is not None
    loaded = Path(module.__file__).resolve()
    distribution = metadata.distribution(dist)
    shipped = {Path(str(distribution.locate_file(f))).resolve() for f in distribution.files or []}
    editable_src = (ROOT / "packages" / dist / "src").resolve()
    assert loaded in shipped or loaded.is_relative_to(editable_src), loaded


def test_no_two_distributions_ship_the_same_file() -> None:
    """Installing all six together overwrites nothing (``dist-info`` aside)."""
    seen: dict[str, str] = {}
    clashes = []
    for dist in DISTRIBUTIONS:
        for file in metadata.files(dist) or []:
            path = str(file)
            if ".dist-info/" in path or path.endswith(".pth"):
                continue
            if path in seen:
                clashes.append(f"{path}: {seen[path]} and {dist}")
            seen[path] = dist
    assert [] == clashes


def test_no_distribution_is_called_sched() -> None:
    """The standard library owns ``sched``: none of ours shadows it."""
    import sched

    assert sched.__file__ is not None
    assert "site-packages" not in sched.__file__
    assert hasattr(sched, "scheduler")
