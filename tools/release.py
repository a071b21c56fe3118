"""Check and build one distribution for release: ``python tools/release.py TARGET``.

TARGET is a distribution (``sched-lock``: a dry run, what ``nox -s release --
sched-lock`` does) or a release tag (``sched-lock-v0.2.0``: what the release
workflow passes). Both ``nox -s release`` and ``.github/workflows/release.yml``
run this one script, so a local dry run checks exactly what a release will.

The checks:

1. TARGET names one of the distributions under ``packages/``; a tag is
   ``<distribution>-v<version>`` and its version is the one the package's
   ``pyproject.toml`` declares.
2. The package's ``CHANGELOG.md`` headings are ``## Unreleased`` or a version
   (``## 0.2.0``, ``## [0.2.0] - 2026-01-31``), newest first, none newer than
   the package's version. At release time the version has its own entry, the
   newest, with content, and no unreleased entry sits above it. A dry run
   also accepts the changes still under ``## Unreleased`` and says what to
   rename before tagging (changelogs stay "Unreleased" until a release).
3. Each sibling the package requires (``sched-lock ~= 0.1``) is in the tree at
   a version inside the range, and the range's floor is that sibling's
   release line (its major.minor): the tests only ever ran against the
   sibling in the tree, so the range must not admit an older one. At release
   time the sibling's version has its CHANGELOG entry: it is released first.

Then (unless ``--check-only``) the package alone is built (sdist, and the
wheel from that sdist, with ``uv build``) into ``--out``, every file name
must carry the version, and ``twine check --strict`` checks the metadata.
Exit status 0 when every check held, 1 otherwise.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from monorepo import PACKAGES_DIR, ROOT, RepoError, siblings, version

__all__ = ["Changelog", "Report", "build", "check", "main", "parse_changelog"]

UNRELEASED = "Unreleased"
HEADING = re.compile(
    r"^\[?(?P<label>[^\]\s]+)\]?(?:\s+[-\u2013\u2014]\s+(?P<date>\d{4}-\d{2}-\d{2}))?\s*$"
)
TAG = re.compile(r"^(?P<dist>sched-[a-z]+)-v(?P<version>\d\S*)$")
FLOOR_OPERATORS = {">=", "~=", "==", "===", ">"}


class ReleaseError(Exception):
    """The target itself cannot be checked (unknown distribution, unreadable changelog)."""


@dataclass
class Report:
    """What the checks found: facts that held, notes for the releaser, and refusals."""

    held: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether nothing was refused."""
        return not self.refusals


@dataclass(frozen=True)
class Changelog:
    """A CHANGELOG's second-level entries, in file order: (label, has content)."""

    entries: tuple[tuple[str, bool], ...]

    def released(self) -> list[Version]:
        """The versions that have an entry, in file order."""
        return [Version(label) for label, _ in self.entries if label != UNRELEASED]

    def has(self, label: str) -> bool:
        """Whether an entry is headed *label* (a version's string form or ``Unreleased``)."""
        return any(entry == label for entry, _ in self.entries)

    def content(self, label: str) -> bool:
        """Whether the entry headed *label* has any line besides sub-headings."""
        return any(has for entry, has in self.entries if entry == label)


def parse_changelog(text: str) -> Changelog:
    """Parse the ``## `` headings of a Keep-a-Changelog file.

    Args:
        text: the file's content.

    Returns:
        The entries, each normalised to ``Unreleased`` or a version's string.

    Raises:
        ReleaseError: a heading is neither ``Unreleased`` nor a version.
    """
    entries: list[tuple[str, bool]] = []
    for block in re.split(r"^## ", text, flags=re.M)[1:]:
        heading, _, body = block.partition("\n")
        match = HEADING.match(heading.strip())
        if match is None:
            raise ReleaseError(f"CHANGELOG heading '## {heading.strip()}' is not a version")
        label = match["label"]
        if label.lower() != UNRELEASED.lower():
            try:
                label = str(Version(label))
            except InvalidVersion:
                raise ReleaseError(
                    f"CHANGELOG heading '## {heading.strip()}' is not a version"
                ) from None
        else:
            label = UNRELEASED
        content = any(line.strip() and not line.startswith("#") for line in body.splitlines())
        entries.append((label, content))
    return Changelog(tuple(entries))


def _target(target: str, packages_dir: Path) -> tuple[Path, Version | None]:
    """The package folder and, for a tag, the version it names."""
    tag = TAG.match(target)
    dist = tag["dist"] if tag else target
    folder = packages_dir / dist
    if not (folder / "pyproject.toml").exists():
        known = ", ".join(sorted(p.parent.name for p in packages_dir.glob("*/pyproject.toml")))
        raise ReleaseError(f"{target!r} names no distribution under {packages_dir} ({known})")
    if tag is None:
        return folder, None
    try:
        return folder, Version(tag["version"])
    except InvalidVersion:
        raise ReleaseError(f"tag {target!r}: {tag['version']!r} is not a version") from None


def _changelog(folder: Path) -> Changelog:
    path = folder / "CHANGELOG.md"
    if not path.exists():
        raise ReleaseError(f"{folder.name} has no CHANGELOG.md")
    return parse_changelog(path.read_text(encoding="utf-8"))


def _check_changelog(
    report: Report, dist: str, current: Version, changelog: Changelog, *, release: bool
) -> None:
    released = changelog.released()
    if released != sorted(released, reverse=True):
        report.refusals.append(f"{dist}'s CHANGELOG entries are not newest first: {released}")
    newer = [v for v in released if v > current]
    if newer:
        report.refusals.append(
            f"{dist}'s CHANGELOG has an entry for {newer[0]}, newer than the package's"
            f" version {current} (pyproject.toml): bump the version or fix the entry"
        )
        return
    label = str(current)
    if changelog.has(label):
        if not changelog.content(label):
            report.refusals.append(f"{dist}'s CHANGELOG entry '## {label}' is empty")
        elif changelog.content(UNRELEASED) and _above(changelog, UNRELEASED, label):
            report.refusals.append(
                f"{dist}'s CHANGELOG has unreleased changes above '## {label}':"
                " move them into the release's entry or bump the version"
            )
        else:
            report.held.append(f"{dist}'s CHANGELOG has its entry '## {label}'")
        return
    if release:
        report.refusals.append(
            f"{dist}'s CHANGELOG has no entry '## {label}': rename '## Unreleased' to"
            f" '## {label} - <date>' in the commit you tag"
        )
    elif changelog.content(UNRELEASED):
        report.held.append(f"{dist}'s changes since its last release are under '## Unreleased'")
        report.notes.append(
            f"before tagging {dist}-v{label}: rename '## Unreleased' in its CHANGELOG to"
            f" '## {label} - <date>' (bump the version first if {label} is already released)"
        )
    else:
        report.refusals.append(
            f"{dist}'s CHANGELOG has neither an entry '## {label}' nor '## Unreleased' changes"
        )


def _above(changelog: Changelog, first: str, second: str) -> bool:
    labels = [label for label, _ in changelog.entries]
    return labels.index(first) < labels.index(second)


def _check_siblings(report: Report, folder: Path, *, release: bool) -> None:
    try:
        found = siblings(folder)
    except RepoError as exc:
        report.refusals.append(str(exc))
        return
    for req, sibling in found:
        local = version(sibling)
        floors = [Version(s.version) for s in req.specifier if s.operator in FLOOR_OPERATORS]
        line = f"{local.major}.{local.minor}"
        if not floors:
            report.refusals.append(
                f"{folder.name} requires {req}, with no floor: declare '{req.name} ~= {line}'"
            )
            continue
        floor = max(floors)
        if floor.release[:2] < local.release[:2]:
            report.refusals.append(
                f"{folder.name} requires {req}, which admits {req.name} {floor}, but its tests"
                f" ran only against {req.name} {local} (the tree's): raise the floor to"
                f" '{req.name} ~= {line}'"
            )
            continue
        report.held.append(f"{folder.name} requires {req}; the tree's {req.name} is {local}")
        if not _changelog(sibling).has(str(local)):
            first = f"release {req.name} {local} first (its CHANGELOG has no entry '## {local}')"
            (report.refusals if release else report.notes).append(
                f"{folder.name} requires {req}: {first}"
            )


def check(target: str, packages_dir: Path = PACKAGES_DIR) -> tuple[Path, Version, Report]:
    """Run every release check of *target* (a distribution, or a release tag).

    Args:
        target: ``sched-lock`` for a dry run, ``sched-lock-v0.2.0`` at release time.
        packages_dir: where the distributions live.

    Returns:
        The package folder, its version, and the report.

    Raises:
        ReleaseError: *target* names no distribution, or its changelog cannot be read.
    """
    folder, tagged = _target(target, packages_dir)
    dist = folder.name
    current = version(folder)
    report = Report()
    release = tagged is not None
    if tagged is not None:
        if tagged == current:
            report.held.append(f"tag {target} is {dist}'s version {current}")
        else:
            report.refusals.append(
                f"tag {target} says {tagged}, but {dist}'s pyproject.toml says {current}"
            )
    _check_changelog(report, dist, current, _changelog(folder), release=release)
    _check_siblings(report, folder, release=release)
    return folder, current, report


def build(folder: Path, current: Version, out: Path) -> list[Path]:
    """Build *folder*'s sdist and wheel into *out* (emptied first) and check them.

    Returns:
        The built files.

    Raises:
        ReleaseError: a file lacks the version in its name.
        subprocess.CalledProcessError: the build or ``twine check --strict`` failed.
    """
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-m", "uv", "build", "--quiet", "--out-dir", str(out), str(folder)],
        check=True,
    )
    (out / ".gitignore").unlink(missing_ok=True)  # uv's; the folder is to upload as it is
    built = sorted(out.iterdir())
    stem = folder.name.replace("-", "_")
    expected = {f"{stem}-{current}.tar.gz", f"{stem}-{current}-py3-none-any.whl"}
    if {p.name for p in built} != expected:
        raise ReleaseError(f"built {[p.name for p in built]}, expected {sorted(expected)}")
    subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, built)], check=True
    )
    return built


def main(argv: list[str] | None = None) -> int:
    """Check (and build) TARGET; print what held and what was refused."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", help="a distribution (dry run) or a tag <dist>-v<version>")
    parser.add_argument("--out", type=Path, help="where the files go (default dist/release/<dist>)")
    parser.add_argument("--check-only", action="store_true", help="check, do not build")
    parser.add_argument("--packages-dir", type=Path, default=PACKAGES_DIR, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        folder, current, report = check(args.target, args.packages_dir)
    except ReleaseError as exc:
        print(f"release: refused: {exc}", file=sys.stderr)
        return 1
    kind = "release" if TAG.match(args.target) else "dry run"
    print(f"release: {folder.name} {current} ({kind})")
    for line in report.held:
        print(f"release: ok: {line}")
    for line in report.notes:
        print(f"release: note: {line}")
    for line in report.refusals:
        print(f"release: refused: {line}", file=sys.stderr)
    if not report.ok:
        return 1
    if args.check_only:
        return 0
    out = args.out or ROOT / "dist" / "release" / folder.name
    try:
        built = build(folder, current, out)
    except (ReleaseError, subprocess.CalledProcessError) as exc:
        print(f"release: refused: {exc}", file=sys.stderr)
        return 1
    for path in built:
        print(f"release: built {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
