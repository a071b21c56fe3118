"""The coverage floors hold: a package below its floor fails, and so does one with no data
under CI; every package of the tree has a floor."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from coverage import Coverage

from coverage_floors import check, floors
from monorepo import discover


def measured_package(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    """A package ``pkg_a`` whose one module ran 4 of its 7 lines, and a ``pkg_b`` never run;
    returns the coverage data file and the packages."""
    packages = {}
    for name in ("pkg_a", "pkg_b"):
        source = tmp_path / "packages" / name.replace("_", "-") / "src" / name
        source.mkdir(parents=True)
        (source / "__init__.py").write_text(
            "def used():\n    return 1\n\n\ndef unused():\n    a = 1\n    b = 2\n    return a + b\n"
            "\n\nused()\n",
            encoding="utf-8",
        )
        packages[name] = source.parent.parent
    data = tmp_path / ".coverage"
    cov = Coverage(data_file=str(data), data_suffix=False, branch=True, config_file=False)
    cov.start()
    try:
        spec = importlib.util.spec_from_file_location(
            "pkg_a", packages["pkg_a"] / "src" / "pkg_a" / "__init__.py"
        )
        assert spec is not None
        assert spec.loader is not None
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    finally:
        cov.stop()
    cov.save()
    return data, packages


def test_a_package_at_or_above_its_floor_passes_and_one_below_fails(tmp_path: Path) -> None:
    """The figure is the package's own (its src files only); the verdict follows the floor."""
    data, packages = measured_package(tmp_path)
    only_a = {"pkg_a": packages["pkg_a"]}
    lines, passed = check(data, {"pkg_a": 80}, only_a, ci=True)
    assert not passed
    assert lines[0].startswith("pkg_a")
    assert lines[0].endswith("floor 80%  BELOW THE FLOOR")
    lines, passed = check(data, {"pkg_a": 50}, only_a, ci=True)
    assert passed, lines
    assert lines[0].endswith("floor 50%  ok")


def test_a_package_without_data_fails_only_under_ci(tmp_path: Path) -> None:
    """Locally a package whose tests did not run is named and passed over; under CI, it fails."""
    data, packages = measured_package(tmp_path)
    wanted = {"pkg_a": 0, "pkg_b": 0}
    assert check(data, wanted, packages, ci=False)[1]
    lines, passed = check(data, wanted, packages, ci=True)
    assert not passed
    assert any(line.startswith("pkg_b") and "no data" in line for line in lines)


def test_a_package_without_a_floor_fails(tmp_path: Path) -> None:
    """A new package must say how covered it has to stay."""
    data, packages = measured_package(tmp_path)
    lines, passed = check(data, {"pkg_a": 0}, packages, ci=False)
    assert not passed
    assert any(line.startswith("pkg_b") and "no floor" in line for line in lines)


def test_every_package_of_the_tree_has_a_floor() -> None:
    """The root pyproject.toml names a floor for exactly the packages in the tree."""
    assert sorted(discover()) == sorted(floors())
