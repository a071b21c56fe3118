"""Sphinx configuration for the sched documentation site.

``nox -s docs`` builds it as HTML with ``-n -W`` (every reference resolves,
every warning is an error), then checks the built site
(``tests-integration/test_docs_site.py``). The examples are checked by
``tests-integration/test_docs_examples.py``: every ``{doctest}`` block passes
and runs pasted into a file on its own, every ``console`` block prints what
the page shows, every ``python`` block is an excerpt of a file under
``docs/examples/`` that the tests run.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent

# The site's own extension (the API reference) lives in docs/_ext/.
if str(DOCS / "_ext") not in sys.path:
    sys.path.insert(0, str(DOCS / "_ext"))

project = "sched"
author = "The sched developers"
copyright = "2026, The sched developers"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
    "sphinx.ext.intersphinx",
    "sphinx_copybutton",
    "sched_api",
    # Refuses a versionadded/versionchanged marker above its package's version.
    "sched_versions",
]

# Every reference must resolve: ``nox -s docs`` builds with ``-n -W``.
nitpicky = True

# Links into the Python documentation (``timedelta``, ``threading.Event``,
# ``subprocess.CompletedProcess``) come from a copy of its inventory checked in
# beside this file, so the build needs no network. Any Python 3 inventory
# serves (the copy is 3.11's, the oldest Python sched supports); to refresh it,
# on a machine with internet access:
#     python -c "import urllib.request as r; r.urlretrieve(
#         'https://docs.python.org/3/objects.inv', 'docs/_inventories/python.inv')"
intersphinx_mapping = {
    "python": ("https://docs.python.org/3", str(DOCS / "_inventories" / "python.inv")),
}

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"

# The six distributions, by folder: import name (each has a page under
# docs/packages/ with its autodoc reference).
PACKAGES = {
    "sched-interval": "sched_interval",
    "sched-loop": "sched_loop",
    "sched-lock": "sched_lock",
    "sched-exclusive": "sched_exclusive",
    "sched-cmd": "sched_cmd",
    "sched-trigger": "sched_trigger",
}

exclude_patterns = [
    "_build",
    "Thumbs.db",
    ".DS_Store",
    # Written by ``nox -s bench``; performance.md includes them.
    "performance/*.md",
    # Example programs are shown through literalinclude, not built as pages.
    "examples/**",
]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
# The changelog and performance pages include files that other tools write
# (Keep a Changelog files, benchmark tables); their heading depth is theirs.
suppress_warnings = ["myst.header"]

# The reference of each package page is written by ``.. sched-api::`` (see
# docs/_ext/sched_api.py): every name in the package's ``__all__``.
sched_packages = sorted(PACKAGES.values())
# Names used in signatures that a package does not export: each gets an entry
# in its package's reference (documented by the ``#:`` comment on its
# definition), so that every signature links somewhere.
sched_signature_types = {
    "sched_interval": ["Duration", "DurationLike", "Bounds"],
    "sched_cmd": ["Duration", "Command", "Input", "T"],
    "sched_exclusive": ["Duration"],
    "sched_trigger": ["Duration", "P"],
}
autodoc_default_options = {
    "members": True,
    "show-inheritance": True,
}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Types join the descriptions written in Args: and Returns:. (With
# "documented_params", a class whose ``__new__`` is annotated gained a stray
# "Return type" field.)
autodoc_typehints_description_target = "documented"
autodoc_preserve_defaults = True
# ``timedelta``, not ``datetime.timedelta``; ``Outcome``, not its module path.
python_use_unqualified_type_names = True
# In docstrings, `name` (single backticks) links to the object it names.
default_role = "py:obj"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

# The copy button copies what a reader types: no ``>>>``/``...``/``$``
# prompts, and no output lines.
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = True

html_theme = "furo"
html_title = "sched"
html_static_path = ["_static"]
html_css_files = ["sched.css"]


BENCH_MARKER = "<!-- bench tables -->"
SUMMARY_MARKER = "<!-- bench summary -->"


def _bench_summary() -> str:
    """The summary table: every row of ``SUMMARY`` in ``bench/_common.py``.

    Each bench script writes the figures of its rows to
    ``docs/performance/<import_name>.summary.json`` beside its tables; a row
    no script has written yet says so.
    """
    import json
    import runpy

    common = runpy.run_path(str(ROOT / "bench" / "_common.py"))
    written: dict[tuple[str, str], dict[str, object]] = {}
    for path in sorted((DOCS / "performance").glob("*.summary.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        for key, row in record["rows"].items():
            written[(record["dist"], key)] = row
    lines = [
        "| package | what is measured | sched | baseline | ratio | target |",
        "|---|---|---:|---:|---:|---|",
    ]
    for row in common["SUMMARY"]:
        figures = written.get((row.dist, row.key))
        target = row.target or "—"
        if figures is None:
            cells = ["_not measured yet_", "—", "—", target]
        else:
            if row.target and figures["met"] is not None:
                target = f"{row.target}: {'met' if figures['met'] else '**missed**'}"
            cells = [
                str(figures["sched"]),
                str(figures["baseline"]),
                common["ratio"](figures["ratio"]),
                target,
            ]
        lines.append("| " + " | ".join([row.dist, row.what, *cells]) + " |")
    return "\n".join(lines) + "\n"


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
    """Put the benchmark summary and tables into the performance page."""
    if docname == "performance":
        # The summary's inputs are no includes: name them, so a rebuild rereads the page.
        for path in [ROOT / "bench" / "_common.py", *(DOCS / "performance").glob("*.json")]:
            app.env.note_dependency(str(path))  # type: ignore[attr-defined]
        text = source[0].replace(SUMMARY_MARKER, _bench_summary())
        source[0] = text.replace(BENCH_MARKER, _bench_tables())


def setup(app: object) -> dict[str, bool]:
    """Register the source filter that fills in the benchmark tables."""
    app.connect("source-read", _fill_bench_tables)  # type: ignore[attr-defined]
    return {"parallel_read_safe": True}
