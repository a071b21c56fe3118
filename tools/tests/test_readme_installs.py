"""The README's install commands are found in the README and fail loudly when they break.

``nox -s build`` runs every block for real (``tools/readme_installs.py``);
these tests pin how the blocks are found and that a broken one fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from monorepo import ROOT
from readme_installs import REPO_URL, Block, InstallFailed, parse, run_block, script

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_documents_three_ways_to_install_before_the_first_release() -> None:
    """From a clone, from git, from a wheelhouse: each installs sched-exclusive with sched-lock."""
    blocks = parse(README)
    assert 3 == len(blocks)
    clone, git, wheelhouse = blocks
    assert clone.commands[0].startswith(f"git clone {REPO_URL}")
    assert ["sched-lock", "sched-exclusive"] == clone.distributions()
    assert all(f"git+{REPO_URL}#subdirectory=packages/" in c for c in git.commands[-1:])
    assert ["sched-lock", "sched-exclusive"] == git.distributions()
    assert wheelhouse.commands[0].endswith("nox -s wheelhouse")
    assert "--no-index --find-links dist sched-exclusive" in wheelhouse.commands[-1]
    assert ["sched-exclusive"] == wheelhouse.distributions()


def test_the_index_line_is_outside_the_section_that_runs() -> None:
    """The index install works only after the first release, so it is not run (nor claimed)."""
    index = "python3 -m pip install sched-interval sched-loop sched-exclusive sched-cmd"
    assert index in README
    assert all(index not in command for block in parse(README) for command in block.commands)


def test_only_the_named_section_counts_and_it_must_show_a_command() -> None:
    """Blocks outside the section are ignored; a section with no command is an error."""
    text = (
        "# T\n\n```console\n$ pip install sched-x\n```\n\n### Before the first release\n\n"
        "From here:\n\n```console\n$ python3 -m pip install ./packages/sched-lock\n```\n\n"
        "## Next\n\n```console\n$ pip install sched-y\n```\n"
    )
    assert [Block("From here:", ("python3 -m pip install ./packages/sched-lock",))] == parse(text)
    with pytest.raises(InstallFailed, match="shows no command"):
        parse("### Before the first release\n\nNothing yet.\n")
    with pytest.raises(InstallFailed, match="no section"):
        parse("# Something else\n")


def test_the_session_that_ran_is_not_run_again_and_the_address_is_served_locally() -> None:
    """`nox -s wheelhouse`, which ran before the build session, is echoed, not rerun; the
    repo URL is swapped."""
    block = Block(
        "t",
        (
            "python3 -m pip install nox && python3 -m nox -s wheelhouse",
            f"git clone {REPO_URL}",
        ),
    )
    text = script(block, "file://localhost/snap", "wheelhouse")
    assert "python3 -m nox -s wheelhouse\n" not in text.replace("# ran already", "")
    assert "\ngit clone file://localhost/snap\n" in text


def test_a_command_that_fails_fails_the_check(tmp_path: Path) -> None:
    """A documented command that exits non-zero is reported, naming its block."""
    block = Block("broken", ("python3 -m pip install ./packages/sched-nope",))
    with pytest.raises(InstallFailed, match="'broken': a command exited"):
        run_block(block, repo_url="file://localhost/nowhere", root=ROOT)


def test_a_command_that_installs_nothing_fails_the_import_check() -> None:
    """A block whose command succeeds without installing what it names fails the import."""
    block = Block("no-op", ("echo pip install sched-lock",))
    with pytest.raises(InstallFailed, match="sched-lock do not import"):
        run_block(block, repo_url="file://localhost/nowhere", root=ROOT)
