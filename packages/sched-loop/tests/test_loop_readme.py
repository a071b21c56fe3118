"""The README's first example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.mark.skipif(not README.exists(), reason="the README is not next to these tests")
def test_readme_example_runs() -> None:
    """The first ```python block of the README executes without error."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert blocks
    exec(compile(blocks[0], str(README), "exec"), {"__name__": "readme_example"})
