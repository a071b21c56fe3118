"""Hold each package's combined coverage to its floor: ``python tools/coverage_floors.py DATA``.

``nox -s coverage`` runs it on the data it combined from every test session
of the run (each Python, and ``postgres``). The floors are in the root
``pyproject.toml``, ``[tool.sched.coverage-floors]``: one per import name,
in percent, statements and branches together as ``coverage report`` counts
them. A package below its floor fails the run; so does a package with a
floor and no data under ``--ci`` (elsewhere it is named and passed over, as
after ``nox -s "tests-3.12(sched_lock)" coverage``). Raise a floor when a
package's coverage rises; never lower one to let a change through.
"""

from __future__ import annotations

import argparse
import io
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

from coverage import Coverage
from coverage.exceptions import NoDataError

from monorepo import PACKAGES_DIR, ROOT, discover

__all__ = ["check", "floors", "main"]


def floors(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, float]:
    """The floor of each package, by import name."""
    with pyproject.open("rb") as f:
        table = tomllib.load(f)["tool"]["sched"]["coverage-floors"]
    return {name: float(value) for name, value in table.items()}


def check(
    data: Path, wanted: Mapping[str, float], packages: Mapping[str, Path], *, ci: bool
) -> tuple[list[str], bool]:
    """Measure each package against its floor.

    Returns:
        One line per package (its coverage, its floor, the verdict) and
        whether every package passed.
    """
    # data_suffix=False: read the file named, whatever the configured ``parallel`` says.
    cov = Coverage(data_file=str(data), data_suffix=False)
    cov.load()
    lines, passed = [], True
    for name, folder in packages.items():
        if name not in wanted:
            lines.append(f"{name:<16} no floor: add one to [tool.sched.coverage-floors]")
            passed = False
            continue
        floor = wanted[name]
        try:
            percent = cov.report(include=[str(folder / "src" / "*")], file=io.StringIO())
        except NoDataError:
            lines.append(f"{name:<16} no data{'' if ci else ' (its tests did not run)'}")
            passed = passed and not ci
            continue
        verdict = "ok" if percent >= floor else "BELOW THE FLOOR"
        passed = passed and percent >= floor
        lines.append(f"{name:<16} {percent:6.2f}%  floor {floor:g}%  {verdict}")
    return lines, passed


def main(argv: Sequence[str] | None = None) -> int:
    """Print one line per package; exit 1 when one is below its floor (or lacks data
    under ``--ci``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="the combined coverage data file")
    parser.add_argument("--ci", action="store_true", help="a package without data fails")
    args = parser.parse_args(argv)
    lines, passed = check(args.data, floors(), discover(PACKAGES_DIR), ci=args.ci)
    print("coverage per package, every test session combined:")
    for line in lines:
        print(f"  {line}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
