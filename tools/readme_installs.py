"""Run the README's install commands for real: ``python tools/readme_installs.py``.

The README's section "Before the first release" holds one ``console`` block
per way of installing a distribution. Each block runs here as written, in a
fresh virtual environment made with this interpreter's ``venv`` (so its pip
is the one that Python ships), through ``bash -e`` with that environment
first on ``PATH``; then every distribution the block names must import from
that environment, its public API (``__all__``) complete. The run fails at
the first command that fails or import that does not resolve, so a
documented command that stops working fails ``nox -s build``.

The commands are taken from the README itself, never copied, with two
substitutions that make them runnable offline:

* the repository's address is replaced by a ``file://localhost`` URL of a
  git snapshot of this working tree (tracked and untracked, not ignored), so
  ``git clone`` and ``git+`` references fetch exactly what is here. The
  ``localhost`` form, like ``https://``, has a host: pip before 24.1 refuses
  ``git+file:///path`` but accepts both of these;
* a ``nox -s <session>`` command naming the session given as
  ``--this-session`` is not run again: it has run already (``nox -s build``
  requires ``wheelhouse``, and ``dist/`` is what it produced).

A block that starts with ``git clone`` runs in an empty directory; the
others run in the repository root, as "from your clone" means.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Block", "InstallFailed", "main", "parse", "run_block", "snapshot"]

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: The heading of the section whose blocks are run.
SECTION = "Before the first release"
#: Where the README says the repository lives.
REPO_URL = "https://github.com/sched-dev/sched"
FENCE = re.compile(r"^```console\n(?P<body>.*?)^```\s*$", re.M | re.S)
DIST = re.compile(r"sched-[a-z]+")


class InstallFailed(Exception):
    """A documented command failed, or what it installed does not import."""


@dataclass(frozen=True)
class Block:
    """One ``console`` block of the section: its title (the sentence above it) and commands."""

    title: str
    commands: tuple[str, ...]

    def distributions(self) -> list[str]:
        """The ``sched-*`` distributions the block's ``pip install`` commands name.

        A requirement names one by its name (``sched-lock``), a direct
        reference (``sched-lock @ git+...``) or its folder (``./packages/sched-lock``).
        """
        found: list[str] = []
        for command in self.commands:
            if "pip install" not in command:
                continue
            for arg in shlex.split(command.split("pip install", 1)[1]):
                name = arg.split(" @ ", 1)[0].rstrip("/").rsplit("/", 1)[-1]
                if DIST.fullmatch(name) and name not in found:
                    found.append(name)
        return found


def section(text: str, heading: str = SECTION) -> str:
    """The body of the Markdown section *heading* (up to the next heading of its level or above).

    Raises:
        InstallFailed: no such heading.
    """
    match = re.search(rf"^(?P<level>#+) {re.escape(heading)}\s*$", text, re.M)
    if match is None:
        raise InstallFailed(f"the README has no section {heading!r}")
    level = len(match["level"])
    end = re.compile(rf"^#{{1,{level}}} ", re.M).search(text, match.end())
    return text[match.end() : end.start() if end else len(text)]


def parse(text: str, heading: str = SECTION) -> list[Block]:
    """The install blocks of the README text: ``$ `` lines of each ``console`` block.

    Raises:
        InstallFailed: the section has no block with a command.
    """
    body = section(text, heading)
    blocks = []
    previous = 0
    for fence in FENCE.finditer(body):
        prose = body[previous : fence.start()].strip().split("\n\n")[-1]
        previous = fence.end()
        commands = tuple(
            line[2:].strip() for line in fence["body"].splitlines() if line.startswith("$ ")
        )
        if commands:
            title = re.split(r"(?<=[.:])\s", " ".join(prose.split()), maxsplit=1)[0]
            blocks.append(Block(title, commands))
    if not blocks:
        raise InstallFailed(f"the README section {heading!r} shows no command")
    return blocks


def snapshot(root: Path, into: Path) -> Path:
    """A one-commit git repository holding what ``git`` sees in *root*'s working tree.

    Returns:
        The repository's folder.
    """
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    repo = into / "sched"
    for name in filter(None, listed.decode().split("\0")):
        source = root / name
        if source.is_file():  # a tracked file deleted in the working tree is gone
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, repo / name)
    git = ["git", "-c", "user.name=snapshot", "-c", "user.email=snapshot@localhost"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "snapshot"]):
        subprocess.run([*git, *args], cwd=repo, check=True)
    return repo


def script(block: Block, repo_url: str, this_session: str | None) -> str:
    """The block as a bash script: each command echoed, then run (``bash -e`` stops at one)."""
    lines = []
    for command in block.commands:
        runnable = command.replace(REPO_URL, repo_url)
        if this_session and re.search(rf"\bnox -s {re.escape(this_session)}$", command):
            lines.append(f"echo {shlex.quote(f'$ {command}  # ran already; not run again')}")
            continue
        lines.append(f"echo {shlex.quote(f'$ {runnable}')}")
        lines.append(runnable)
    return "\n".join(lines) + "\n"


def import_check(distributions: list[str]) -> str:
    """Python that imports each distribution from the environment and checks its ``__all__``."""
    modules = [name.replace("-", "_") for name in distributions]
    return (
        "import importlib\n"
        f"for name in {modules!r}:\n"
        "    module = importlib.import_module(name)\n"
        "    assert 'site-packages' in module.__file__, module.__file__\n"
        "    missing = [n for n in module.__all__ if not hasattr(module, n)]\n"
        "    assert not missing, (name, missing)\n"
        "    print(name, module.__version__, 'imports from', module.__file__)\n"
    )


def run_block(
    block: Block,
    *,
    repo_url: str,
    root: Path = ROOT,
    this_session: str | None = None,
    python: str = sys.executable,
) -> None:
    """Run one block in a fresh venv of *python*, then import what it installed.

    Raises:
        InstallFailed: a command exited non-zero, the block names no
            distribution, or one does not import with its whole ``__all__``.
    """
    distributions = block.distributions()
    if not distributions:
        raise InstallFailed(f"{block.title!r}: no `pip install sched-...` command")
    with tempfile.TemporaryDirectory(prefix="readme-install-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        bin_dir = venv / "bin"
        env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "VIRTUAL_ENV": str(venv),
        }
        env.pop("PYTHONPATH", None)
        work = Path(tmp) / "work"
        work.mkdir()
        cwd = work if block.commands[0].startswith("git clone") else root
        print(f"--- {block.title}", flush=True)
        done = subprocess.run(
            ["bash", "-e", "-c", script(block, repo_url, this_session)],
            cwd=cwd,
            env=env,
            check=False,
        )
        if done.returncode != 0:
            raise InstallFailed(f"{block.title!r}: a command exited {done.returncode}")
        checked = subprocess.run(
            [str(bin_dir / "python"), "-I", "-c", import_check(distributions)],
            cwd=work,
            check=False,
        )
        if checked.returncode != 0:
            raise InstallFailed(f"{block.title!r}: {', '.join(distributions)} do not import")


def main(argv: list[str] | None = None) -> int:
    """Run every install block of the README; exit 1 at the first that fails."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument(
        "--this-session", help="a nox session that has run already (its `nox -s` line is not rerun)"
    )
    args = parser.parse_args(argv)
    try:
        blocks = parse(args.readme.read_text(encoding="utf-8"))
        with tempfile.TemporaryDirectory(prefix="readme-snapshot-") as tmp:
            repo = snapshot(args.readme.parent, Path(tmp))
            for block in blocks:
                run_block(
                    block,
                    repo_url=f"file://localhost{repo}",
                    root=args.readme.parent,
                    this_session=args.this_session,
                )
    except InstallFailed as failure:
        print(f"readme_installs: FAILED: {failure}", file=sys.stderr)
        return 1
    print(f"readme_installs: all {len(blocks)} documented ways of installing work")
    return 0


if __name__ == "__main__":
    sys.exit(main())
