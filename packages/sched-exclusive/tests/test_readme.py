"""The README's example runs and prints what the README says it prints."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import metadata


def readme() -> str:
    """The README, from the installed distribution's metadata (it is the long description).

    Reading it from the metadata rather than the source tree lets the test
    run against an installed wheel too.
    """
    description = metadata("sched-exclusive").json["description"]
    assert isinstance(description, str)
    return description


def test_readme_example_runs() -> None:
    """The first python block runs as a script and prints the block after "prints"."""
    text = readme()
    code = re.search(r"```python\n(.*?)```", text, re.S)
    printed = re.search(r"prints\n\n```\n(.*?)```", text, re.S)
    assert code is not None
    assert printed is not None
    done = subprocess.run(
        [sys.executable, "-c", code.group(1)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert printed.group(1) == done.stdout
