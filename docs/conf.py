"""Sphinx configuration for the sched documentation site.

``nox -s docs`` builds it twice with warnings as errors: once as HTML and once
with the ``doctest`` builder, which executes every ``{doctest}`` block of every
page. Longer examples live as files under ``docs/examples/``, are shown with
``literalinclude`` and are run by ``tests-integration/``.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent

# docs/examples/ is importable from doctest blocks (``import jobrunner``).
sys.path.insert(0, str(DOCS / "examples"))

project = "sched"
author = "The sched developers"
copyright = "2026, The sched developers"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"

# The six distributions, by folder: import name and docs page. A package's page
# (with its autodoc reference) joins the site the moment its source folder
# exists; from then on a broken docstring or example fails the build.
PACKAGES = {
    "sched-interval": "sched_interval",
    "sched-loop": "sched_loop",
    "sched-lock": "sched_lock",
    "sched-exclusive": "sched_exclusive",
    "sched-cmd": "sched_cmd",
    "sched-trigger": "sched_trigger",
}

# Pages that show several packages at work need all of them.
PAGE_NEEDS = {
    "getting-started": set(PACKAGES),
    "composing": set(PACKAGES),
    "operations": set(PACKAGES),
    "compatibility": set(PACKAGES),
    "security": set(PACKAGES),
    "changelog": set(PACKAGES),
}
PAGE_NEEDS.update({f"packages/{dist}": {dist} for dist in PACKAGES})


def _landed(dist: str) -> bool:
    """Tell whether a package's code (an ``__init__`` with ``__all__``) and page exist."""
    init = ROOT / "packages" / dist / "src" / PACKAGES[dist] / "__init__.py"
    page = DOCS / "packages" / f"{dist}.md"
    return page.is_file() and init.is_file() and "__all__" in init.read_text(encoding="utf-8")


LANDED = {dist for dist in PACKAGES if _landed(dist)}

exclude_patterns = [
    "_build",
    "Thumbs.db",
    ".DS_Store",
    # Written by ``nox -s bench``; performance.md includes them.
    "performance/*.md",
    # Example programs are shown through literalinclude, not built as pages.
    "examples/**",
]

_NOT_BUILT = {
    page
    for page, needs in PAGE_NEEDS.items()
    if not needs <= LANDED or not (DOCS / f"{page}.md").is_file()
}
exclude_patterns += [f"{page}.md" for page in sorted(_NOT_BUILT)]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
# The changelog and performance pages include files that other tools write
# (Keep a Changelog files, benchmark tables); their heading depth is theirs.
suppress_warnings = ["myst.header"]

autodoc_default_options = {
    "members": True,
    "show-inheritance": True,
}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

# Every doctest page can run a command line the way a reader would type it:
# ``shell("python -m sched_interval banana")`` prints what it prints (stdout,
# then stderr) and, when it fails, its exit status.
doctest_global_setup = """
import logging
import os
import shlex
import subprocess
import sys
import tempfile

# Log lines a page does not show go nowhere, rather than to stderr through
# logging.lastResort; pages that show them attach their own handler.
logging.getLogger().addHandler(logging.NullHandler())


def shell(command, **kwargs):
    args = shlex.split(command)
    if args[0] == "python":
        args[0] = sys.executable
    elif os.path.exists(os.path.join(os.path.dirname(sys.executable), args[0])):
        args[0] = os.path.join(os.path.dirname(sys.executable), args[0])
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, **kwargs)
    output = (result.stdout + result.stderr).rstrip()
    if output:
        print(output)
    if result.returncode:
        print(f"[exit status {result.returncode}]")
"""

html_theme = "furo"
html_title = "sched"
html_static_path: list[str] = []


def _drop_unbuilt_references(app: object, docname: str, source: list[str]) -> None:
    """Hide toctree lines and links naming a page whose packages have not landed yet."""
    if not _NOT_BUILT:
        return
    import re

    lines = source[0].splitlines(keepends=True)
    text = "".join(line for line in lines if line.strip() not in _NOT_BUILT)
    for page in _NOT_BUILT:
        name = re.escape(page.rpartition("/")[2])
        text = re.sub(rf"\[([^\]]*)\]\((?:[\w./-]*/)?{name}\.md(?:#[^)]*)?\)", r"\1", text)
    source[0] = text


BENCH_MARKER = "<!-- bench tables -->"


def _bench_tables() -> str:
    """Include the table file of every ``bench/bench_<import_name>.py`` script.

    ``nox -s bench`` writes ``docs/performance/<import_name>.md``; each file
    brings its own title, at whatever heading level its script chose, so the
    include shifts it to a second-level heading of this page. Until a script
    has been run, the page says so.
    """
    import re

    sections = []
    for script in sorted((ROOT / "bench").glob("bench_*.py")):
        name = script.stem.removeprefix("bench_")
        dist = name.replace("_", "-")
        table = DOCS / "performance" / f"{name}.md"
        text = table.read_text(encoding="utf-8") if table.is_file() else ""
        first = re.search(r"^(#{1,6}) ", text, re.MULTILINE)
        if first is None:
            sections.append(f"## {dist}\n\n")
            if not text.strip():
                sections.append(f"_No figures yet: run `nox -s bench` (`{script.name}`)._\n\n")
                continue
        offset = 0 if first is None else max(0, 2 - len(first[1]))
        sections.append(f"```{{include}} performance/{name}.md\n:heading-offset: {offset}\n```\n\n")
    return "".join(sections)


def _fill_bench_tables(app: object, docname: str, source: list[str]) -> None:
    """Put the benchmark tables into the performance page."""
    if docname == "performance":
        source[0] = source[0].replace(BENCH_MARKER, _bench_tables())


def setup(app: object) -> dict[str, bool]:
    """Register the source filters (unbuilt pages, benchmark tables)."""
    app.connect("source-read", _drop_unbuilt_references)  # type: ignore[attr-defined]
    app.connect("source-read", _fill_bench_tables)  # type: ignore[attr-defined]
    return {"parallel_read_safe": True}
