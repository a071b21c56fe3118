"""The release check refuses what a release must not ship, on throwaway copies of packages."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from monorepo import PACKAGES_DIR, ROOT, discover
from release import ReleaseError, check, parse_changelog

RELEASE = ROOT / "tools" / "release.py"
ENTRY = "### Fixed\n\n- Something.\n"


def copy_packages(tmp_path: Path, *names: str) -> Path:
    """Copy packages (and the root LICENSE their sdists include) into a throwaway tree."""
    packages = tmp_path / "packages"
    for name in names:
        shutil.copytree(
            PACKAGES_DIR / name,
            packages / name,
            ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"),
        )
    shutil.copy(ROOT / "LICENSE", tmp_path / "LICENSE")
    return packages


def set_version(folder: Path, new: str) -> None:
    """Rewrite the ``version = ...`` line of a package's pyproject."""
    pyproject = folder / "pyproject.toml"
    lines = pyproject.read_text().splitlines(keepends=True)
    lines = [f'version = "{new}"\n' if line.startswith("version = ") else line for line in lines]
    pyproject.write_text("".join(lines))


def set_changelog(folder: Path, *entries: tuple[str, str]) -> None:
    """Replace a package's CHANGELOG with the given ``(heading, body)`` entries."""
    text = "# Changelog\n\n" + "".join(f"## {head}\n\n{body}\n" for head, body in entries)
    (folder / "CHANGELOG.md").write_text(text)


def release(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the release script as the workflow and ``nox -s release`` do."""
    return subprocess.run(
        [sys.executable, str(RELEASE), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("dist", sorted(p.name for p in discover().values()))
def test_dry_run_passes_for_every_package_in_this_tree(dist: str) -> None:
    """A dry run of each distribution as the tree stands holds (changes under Unreleased)."""
    _, _, report = check(dist)
    assert [] == report.refusals


def test_release_refuses_a_tag_that_is_not_the_package_version(tmp_path: Path) -> None:
    """sched-lock-v0.3.0 on a tree whose sched-lock is 0.2.0 is refused, naming both."""
    packages = copy_packages(tmp_path, "sched-lock")
    set_version(packages / "sched-lock", "0.2.0")
    set_changelog(packages / "sched-lock", ("0.2.0 - 2026-01-31", ENTRY))
    _, _, report = check("sched-lock-v0.3.0", packages)
    assert ["tag sched-lock-v0.3.0 says 0.3.0, but sched-lock's pyproject.toml says 0.2.0"] == (
        report.refusals
    )


def test_release_refuses_a_version_without_its_changelog_entry(tmp_path: Path) -> None:
    """At release time the changes must have moved from Unreleased to the version's entry."""
    packages = copy_packages(tmp_path, "sched-lock")
    set_version(packages / "sched-lock", "0.2.0")
    set_changelog(packages / "sched-lock", ("Unreleased", ENTRY), ("0.1.0", ENTRY))
    _, _, dry = check("sched-lock", packages)
    _, _, tagged = check("sched-lock-v0.2.0", packages)
    assert [] == dry.refusals
    assert any("rename '## Unreleased'" in note for note in dry.notes)
    assert 1 == len(tagged.refusals)
    assert "has no entry '## 0.2.0'" in tagged.refusals[0]


def test_dry_run_refuses_a_changelog_newer_than_the_version(tmp_path: Path) -> None:
    """A CHANGELOG entry for 0.3.0 in a package still at 0.2.0 is a mismatch, even in a dry run."""
    packages = copy_packages(tmp_path, "sched-lock")
    set_version(packages / "sched-lock", "0.2.0")
    set_changelog(packages / "sched-lock", ("[0.3.0] - 2026-02-01", ENTRY), ("0.2.0", ENTRY))
    _, _, report = check("sched-lock", packages)
    assert 1 == len(report.refusals)
    assert "entry for 0.3.0, newer than the package's version 0.2.0" in report.refusals[0]


def test_release_refuses_unreleased_changes_above_the_entry(tmp_path: Path) -> None:
    """Changes left under Unreleased above the version's entry would ship undocumented."""
    packages = copy_packages(tmp_path, "sched-lock")
    set_version(packages / "sched-lock", "0.2.0")
    set_changelog(packages / "sched-lock", ("Unreleased", ENTRY), ("0.2.0 - 2026-01-31", ENTRY))
    _, _, report = check("sched-lock-v0.2.0", packages)
    assert 1 == len(report.refusals)
    assert "unreleased changes above '## 0.2.0'" in report.refusals[0]


def test_release_accepts_a_matching_tag_version_and_entry(tmp_path: Path) -> None:
    """Tag, pyproject and CHANGELOG agreeing (an empty Unreleased above is fine) is a release."""
    packages = copy_packages(tmp_path, "sched-lock")
    set_version(packages / "sched-lock", "0.2.0")
    set_changelog(
        packages / "sched-lock",
        ("Unreleased", ""),
        ("[0.2.0] - 2026-01-31", ENTRY),
        ("0.1.0", ENTRY),
    )
    _, version, report = check("sched-lock-v0.2.0", packages)
    assert "0.2.0" == str(version)
    assert [] == report.refusals


def test_a_sibling_range_must_not_admit_versions_older_than_the_tested_one(
    tmp_path: Path,
) -> None:
    """sched-exclusive's 'sched-lock ~= 0.1' is refused once the tree's sched-lock is 0.2."""
    packages = copy_packages(tmp_path, "sched-lock", "sched-exclusive")
    set_version(packages / "sched-lock", "0.2.0")
    set_changelog(packages / "sched-lock", ("0.2.0", ENTRY))
    _, _, report = check("sched-exclusive", packages)
    [refusal] = report.refusals
    assert "admits sched-lock 0.1, but its tests ran only against sched-lock 0.2.0" in refusal
    assert "raise the floor to 'sched-lock ~= 0.2'" in refusal


def test_a_sibling_is_released_before_what_requires_it(tmp_path: Path) -> None:
    """Releasing sched-exclusive while the sched-lock it needs is unreleased is refused."""
    packages = copy_packages(tmp_path, "sched-lock", "sched-exclusive")
    set_changelog(packages / "sched-exclusive", ("0.1.0", ENTRY))
    _, _, report = check("sched-exclusive-v0.1.0", packages)
    assert 1 == len(report.refusals)
    assert "release sched-lock 0.1.0 first" in report.refusals[0]
    set_changelog(packages / "sched-lock", ("0.1.0", ENTRY))
    _, _, report = check("sched-exclusive-v0.1.0", packages)
    assert [] == report.refusals


def test_a_sibling_outside_the_declared_range_is_refused(tmp_path: Path) -> None:
    """A tree whose sched-lock is outside sched-exclusive's range cannot release it."""
    packages = copy_packages(tmp_path, "sched-lock", "sched-exclusive")
    set_version(packages / "sched-lock", "1.0.0")
    _, _, report = check("sched-exclusive", packages)
    assert ["sched-exclusive declares 'sched-lock ~= 0.1'; the local sched-lock is 1.0.0"] == (
        report.refusals
    )


def test_unknown_targets_and_headings_are_errors(tmp_path: Path) -> None:
    """A target naming no distribution, or a heading that is no version, stops the check."""
    with pytest.raises(ReleaseError, match="names no distribution"):
        check("sched-nope")
    with pytest.raises(ReleaseError, match="is not a version"):
        parse_changelog("# Changelog\n\n## Next\n\n- x\n")


def test_changelog_headings_in_keep_a_changelog_forms() -> None:
    """Bracketed, dated and bare headings parse; content is any line but a sub-heading."""
    log = parse_changelog(
        "# Changelog\n\n## [Unreleased]\n\n### Added\n\n## [1.2.0] - 2026-01-31\n\n- x\n"
        "## 1.1.0\n\n- y\n"
    )
    assert (("Unreleased", False), ("1.2.0", True), ("1.1.0", True)) == log.entries


def test_cli_refuses_a_mismatch_with_exit_status_1(tmp_path: Path) -> None:
    """The script the workflow runs exits 1 on a version/changelog mismatch and says why."""
    packages = copy_packages(tmp_path, "sched-lock")
    set_version(packages / "sched-lock", "0.2.0")
    set_changelog(packages / "sched-lock", ("0.3.0", ENTRY))
    result = release("sched-lock", "--packages-dir", str(packages))
    assert 1 == result.returncode, result.stdout + result.stderr
    assert "refused: sched-lock's CHANGELOG has an entry for 0.3.0" in result.stderr


def test_cli_builds_one_package_alone_and_checks_it(tmp_path: Path) -> None:
    """A passing release builds exactly that package's sdist and wheel, metadata checked."""
    packages = copy_packages(tmp_path, "sched-lock")
    set_version(packages / "sched-lock", "0.2.0")
    set_changelog(packages / "sched-lock", ("0.2.0 - 2026-01-31", ENTRY))
    out = tmp_path / "out"
    result = release("sched-lock-v0.2.0", "--packages-dir", str(packages), "--out", str(out))
    assert 0 == result.returncode, result.stdout + result.stderr
    assert ["sched_lock-0.2.0-py3-none-any.whl", "sched_lock-0.2.0.tar.gz"] == sorted(
        p.name for p in out.iterdir()
    )
    with zipfile.ZipFile(out / "sched_lock-0.2.0-py3-none-any.whl") as wheel:
        assert "sched_lock/__init__.py" in wheel.namelist()
