"""The README's Quick start lists the demo's steps, in the demo's order."""

from __future__ import annotations

import re
import runpy

from monorepo import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
DEMO = runpy.run_path(str(ROOT / "docs" / "examples" / "demo.py"))


def test_the_quick_start_lists_the_demo_steps_in_order() -> None:
    """Each numbered item after the demo command is the demo's heading with that number."""
    after_demo = README.split("python3 -m nox -s demo", 1)[1].split("```console", 1)[0]
    listed = re.findall(r"^(\d+)\. (.+)$", after_demo, re.M)
    assert [(str(n), step) for n, step in enumerate(DEMO["STEPS"], 1)] == listed
