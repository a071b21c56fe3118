"""The performance page: a summary at the top, one report shape, nothing of the build machine.

``nox -s docs`` runs this after the build; the built page is read from
``SCHED_DOCS_HTML`` (the checks of the built page skip without it), the
tables the bench scripts wrote from ``docs/performance/``.
"""

from __future__ import annotations

import html
import itertools
import json
import os
import re
import runpy
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
HTML = Path(os.environ.get("SCHED_DOCS_HTML", ROOT / "docs" / "_build" / "html"))
TABLES = ROOT / "docs" / "performance"
COMMON: dict[str, Any] = runpy.run_path(str(ROOT / "bench" / "_common.py"))
#: Scripts still writing their tables their own way (another branch is
#: changing them); each adopts bench/_common.py's Report, then leaves this set.
NOT_YET_ADOPTED: set[str] = set()
REPORTS = sorted(
    path
    for path in TABLES.glob("*.md")
    if path.stem not in NOT_YET_ADOPTED and (ROOT / "bench" / f"bench_{path.stem}.py").is_file()
)
#: A count of one with a plural noun: "1 clients".
ONE_PLURAL = re.compile(
    r"(?<![\d.,])\b1 (clients|calls|rounds|operations|ticks|batches|CPUs|cores|wake-ups)\b"
)
#: Sphinx's typographic quotes, back to what the source says.
SMART_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'})
#: What a machine's interpreter path looks like (``/…/.nox/bench/bin/python``).
INTERPRETER_PATH = re.compile(r"/[\w./-]*/bin/python[\d.]*")


def built_page() -> str:
    """The performance page ``nox -s docs`` has just built (elsewhere: skipped, as a
    site left in ``docs/_build`` by an earlier build may be stale)."""
    page = HTML / "performance.html"
    if "SCHED_DOCS_HTML" not in os.environ or not page.is_file():
        pytest.skip("reads the site nox -s docs builds (it sets SCHED_DOCS_HTML)")
    return page.read_text(encoding="utf-8")


def page_text() -> str:
    """The built performance page's text, tags stripped."""
    return html.unescape(re.sub(r"<[^>]+>", " ", built_page()))


def test_the_page_opens_with_the_summary() -> None:
    page = built_page()
    tables = re.findall(r"<table.*?</table>", page, re.S)
    assert tables, "the performance page has no table"
    cells = [
        " ".join(html.unescape(re.sub(r"<[^>]+>", "", cell)).translate(SMART_QUOTES).split())
        for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", tables[0], re.S)
    ]
    assert cells[:6] == ["package", "what is measured", "sched", "baseline", "ratio", "target"]
    for row in COMMON["SUMMARY"]:
        assert re.sub(r"[`*]", "", row.what) in cells, row


def test_no_path_of_the_build_machine() -> None:
    text = page_text()
    assert str(ROOT) not in text
    assert not INTERPRETER_PATH.search(text), INTERPRETER_PATH.search(text)


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: p.stem)
def test_counts_agree_with_their_nouns(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert not ONE_PLURAL.search(text), ONE_PLURAL.search(text)


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: p.stem)
def test_one_report_shape(path: Path) -> None:
    """A ``##`` title, the environment and command, ``###`` sections, one table shape."""
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("## sched-"), lines[0]
    environment = re.compile(
        rf"^Python \d+\.\d+\.\d+\S* \(\w+\), .*\. Command: `python bench/bench_{path.stem}\.py"
    )
    assert environment.match(lines[2]), lines[2]
    headings = [line for line in lines[1:] if line.startswith("#")]
    assert headings, "no section"
    assert all(line.startswith("### ") for line in headings), headings
    headers = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for previous, line in itertools.pairwise(lines)
        if line.startswith("|") and not previous.startswith("|")
    ]
    assert headers, "no table"
    for header in headers:
        assert header[0] in ("variant", "raw value"), header
        ratios = [cell for cell in header if cell.startswith("ratio")]
        assert ratios in ([], ["ratio to baseline"]), header
        assert not ratios or header[-1] == "ratio to baseline", header
    for line in lines:
        if line.startswith("|") and not line.startswith("|---"):
            last = line.strip("|").split("|")[-1].strip()
            assert not re.fullmatch(r"\d+\.\d+", last), f"a ratio without its x: {line}"


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: p.stem)
def test_the_summary_rows_are_the_scripts(path: Path) -> None:
    summary = COMMON["summary_path"](path)
    assert summary.is_file(), f"{path.name} has no {summary.name}: rerun its script"
    record = json.loads(summary.read_text(encoding="utf-8"))
    keys = {(row.dist, row.key) for row in COMMON["SUMMARY"]}
    assert {(record["dist"], key) for key in record["rows"]} <= keys


@pytest.mark.parametrize(
    ("number", "word", "expected"),
    [(1, "client", "1 client"), (8, "client", "8 clients"), (2000, "call", "2,000 calls")],
)
def test_plural(number: int, word: str, expected: str) -> None:
    assert COMMON["plural"](number, word) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, "0 s"), (150e-9, "150 ns"), (5.674e-6, "5.67 µs"), (999.6e-6, "1.00 ms"), (1.2, "1.20 s")],
)
def test_seconds(value: float, expected: str) -> None:
    assert COMMON["seconds"](value) == expected
