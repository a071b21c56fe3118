"""Write the private modules that several packages copy from one source, or check them.

Each distribution depends on nothing outside the standard library, so a
helper that several of them need is copied into each, byte for byte, rather
than shared through a runtime package. The one source of each lives in
``tools/copied/``; `COPIES` says which packages carry it::

    python tools/copies.py          write every copy from its source
    python tools/copies.py --check  exit 1, naming every copy that differs

A copy that differs from its source, a copy missing from a package listed
for it, and a module of a copied name in a package not listed for it all
count as differences.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES_DIR = ROOT / "packages"
__all__ = ["COPIES", "PACKAGES_DIR", "ROOT", "SOURCES", "differences", "main", "targets", "write"]

#: Where the one source of each copied module lives.
SOURCES = ROOT / "tools" / "copied"

#: Each copied module and the import names of the packages that carry it.
COPIES: dict[str, tuple[str, ...]] = {
    # Duration arguments: a timedelta or a number of seconds.
    "_durations.py": (
        "sched_cmd",
        "sched_exclusive",
        "sched_interval",
        "sched_loop",
        "sched_trigger",
    ),
    # typing.final without importing typing at run time.
    "_compat.py": ("sched_cmd", "sched_exclusive", "sched_interval", "sched_lock", "sched_trigger"),
    # Helper threads started with signals blocked; a threading.Event as a callback.
    "_stopwatch.py": ("sched_cmd", "sched_exclusive", "sched_loop", "sched_trigger"),
}


def targets(packages_dir: Path = PACKAGES_DIR) -> dict[Path, Path]:
    """Map every copy that should exist to its source.

    Args:
        packages_dir: where the distributions live (``packages/``).

    Returns:
        ``packages/<dist>/src/<import_name>/<module>`` to ``tools/copied/<module>``.
    """
    folders = {src.name: src for src in packages_dir.glob("*/src/*") if src.is_dir()}
    return {
        folders[package] / module: SOURCES / module
        for module, packages in COPIES.items()
        for package in packages
    }


def differences(packages_dir: Path = PACKAGES_DIR) -> list[str]:
    """Say what differs between the tree and `COPIES`; an empty list when nothing does.

    Args:
        packages_dir: where the distributions live (``packages/``).

    Returns:
        One line per copy that differs from its source, is missing, or is
        present in a package that `COPIES` does not list for it.
    """
    wanted = targets(packages_dir)
    found: list[str] = []
    for copy, source in sorted(wanted.items()):
        if not copy.exists():
            found.append(f"{copy}: missing (a copy of {source})")
        elif copy.read_bytes() != source.read_bytes():
            found.append(f"{copy}: differs from {source}")
    for module in COPIES:
        for copy in sorted(packages_dir.glob(f"*/src/*/{module}")):
            if copy not in wanted:
                found.append(f"{copy}: not listed in tools/copies.py COPIES[{module!r}]")
    return found


def write(packages_dir: Path = PACKAGES_DIR) -> list[Path]:
    """Write every copy that is missing or differs from its source.

    Args:
        packages_dir: where the distributions live (``packages/``).

    Returns:
        The copies written.
    """
    written = []
    for copy, source in sorted(targets(packages_dir).items()):
        content = source.read_bytes()
        if not copy.exists() or copy.read_bytes() != content:
            copy.write_bytes(content)
            written.append(copy)
    return written


def main(argv: list[str]) -> int:
    """Run the command line (see the module documentation); return the exit status."""
    if argv not in ([], ["--check"]):
        print("usage: python tools/copies.py [--check]", file=sys.stderr)
        return 2
    if argv:
        found = differences()
        for line in found:
            print(line, file=sys.stderr)
        if found:
            print("run `python tools/copies.py` to write the copies", file=sys.stderr)
        return 1 if found else 0
    for copy in write():
        print(f"wrote {copy.relative_to(ROOT)}")
    strays = [line for line in differences() if "not listed" in line]
    for line in strays:
        print(line, file=sys.stderr)
    return 1 if strays else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
