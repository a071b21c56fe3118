"""Every package README's example runs as written, and prints what the README says.

The example is a README's first ```` ```python ```` block (later blocks are
excerpts that lean on names defined elsewhere). It runs as a script in a
fresh interpreter, from an empty working directory. Where the README shows
the output (a plain block introduced by "prints" right after it), the output
must be exactly that; the examples that print without showing it are held to
their output here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
READMES = sorted((ROOT / "packages").glob("*/README.md"))
#: The output of the examples whose README does not show it.
PRINTS = {
    "sched-cmd": "synced\n",
    "sched-trigger": "done True 10\n",
}
EXAMPLE = re.compile(r"```python\n(.*?)```(?:\s*\n\s*prints\s*\n\s*```\n(.*?)```)?", re.S)


@pytest.mark.parametrize("readme", READMES, ids=[p.parent.name for p in READMES])
def test_the_readme_example_runs_and_prints_what_it_says(readme: Path, tmp_path: Path) -> None:
    """The first python block runs as a script (exit status 0) and prints its shown output."""
    match = EXAMPLE.search(readme.read_text(encoding="utf-8"))
    assert match is not None, f"{readme} has no ```python example"
    code, shown = match.groups()
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    expected = shown if shown is not None else PRINTS.get(readme.parent.name)
    if expected is not None:
        assert expected == done.stdout
