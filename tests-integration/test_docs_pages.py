"""What the pages promise about the code stays true as the code changes.

* The operations page's log tables list every line the libraries can log: each
  logging call's message literal is read from ``packages/*/src`` (AST), and a
  table row must show that message (its ``%s``/``%d`` and ``{...}`` parts
  filled in with any text) at that level.
* Until a distribution's first release (its tag ``<dist>-v<version>``), its
  changelog has only an "Unreleased" section and its page says how to install
  it from the repository.
* "the spec" is never written where a reader sees it: say "the Go library".
"""

from __future__ import annotations

import ast
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
OPERATIONS = DOCS / "operations.md"
DISTS = sorted(p.parent.name for p in (ROOT / "packages").glob("*/pyproject.toml"))
#: Logger methods and the level each logs at.
LEVEL_METHODS = {
    "debug": "DEBUG",
    "info": "INFO",
    "warning": "WARNING",
    "error": "ERROR",
    "exception": "ERROR",
    "critical": "CRITICAL",
}
#: Calls that build a message logged later elsewhere: callee name -> (argument, level).
#: (sched-interval returns its warnings before logging them.)
MESSAGE_BUILDERS = {"IntervalWarning": (0, "WARNING")}
#: Logging calls whose message is not a literal because they forward one built
#: elsewhere (``file:function``); their literals are found at the builders and
#: helper calls.
FORWARDERS = {
    "sched-exclusive/src/sched_exclusive/_coalesce.py:__call__",
    "sched-interval/src/sched_interval/_interval.py:_emit",
}


@dataclass(frozen=True)
class LogLine:
    """A message a library logs: its level, its template and where it is written."""

    level: str
    template: ast.expr
    where: str

    def pattern(self) -> re.Pattern[str]:
        """The message as a pattern: literal text, with any text for each value."""
        parts: list[str] = []
        for piece in pieces(self.template):
            if piece is None:
                parts.append(".+?")
            else:
                for i, chunk in enumerate(re.split(r"%[sdr]", piece)):
                    parts.append(("" if i == 0 else ".+?") + re.escape(chunk))
        return re.compile("".join(parts))

    def text(self) -> str:
        """The template as written, for a failure message."""
        return "".join("{…}" if p is None else p for p in pieces(self.template))


def pieces(node: ast.expr) -> list[str | None]:
    """A string expression's literal pieces; ``None`` for each computed part."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [v.value if isinstance(v, ast.Constant) else None for v in node.values]  # type: ignore[misc]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return [*pieces(node.left), *pieces(node.right)]
    return [None]


def is_string(node: ast.expr) -> bool:
    """Whether an expression is a message literal (a string, f-string or their sum)."""
    return any(p is not None for p in pieces(node))


def level_constant(node: ast.expr) -> str | None:
    """``logging.INFO`` -> ``"INFO"``."""
    if isinstance(node, ast.Attribute) and node.attr in LEVEL_METHODS.values():
        return node.attr
    return None


def library_log_lines() -> tuple[list[LogLine], list[str]]:
    """Every message the libraries log, and every logging call with no literal to find."""
    found: list[LogLine] = []
    opaque: list[str] = []
    for path in sorted((ROOT / "packages").glob("*/src/*/*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = str(path.relative_to(ROOT / "packages"))
        functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
        for function in functions:
            for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
                where = f"{rel}:{function.name}:{call.lineno}"
                func = call.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                args = call.args
                if name in MESSAGE_BUILDERS:
                    index, level = MESSAGE_BUILDERS[name]
                    found.append(LogLine(level, args[index], where))
                elif args and level_constant(args[0]) and len(args) > 1 and is_string(args[1]):
                    found.append(LogLine(level_constant(args[0]) or "", args[1], where))
                elif isinstance(func, ast.Attribute) and name in (*LEVEL_METHODS, "log") and args:
                    # (With no arguments it is no logging call: ``task.exception()``.)
                    message = args[1] if name == "log" and len(args) > 1 else args[0]
                    if name != "log" and args and is_string(message):
                        found.append(LogLine(LEVEL_METHODS[name], message, where))
                    elif f"{rel}:{function.name}" not in FORWARDERS and args:
                        opaque.append(where)
    return found, opaque


def log_rows() -> list[tuple[str, list[str]]]:
    """The rows of the operations page's log tables: (level, the code spans of the row)."""
    text = OPERATIONS.read_text(encoding="utf-8")
    section = text[text.index("## The log lines") :]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells and cells[0] in (*LEVEL_METHODS.values(),):
            rows.append((cells[0], re.findall(r"`([^`]+)`", cells[1] if len(cells) > 1 else "")))
    return rows


def test_every_logging_call_has_a_findable_message() -> None:
    """Each logging call passes a message literal (or is a known forwarder)."""
    _, opaque = library_log_lines()
    assert [] == opaque, (
        "these logging calls pass no message literal, so the log table cannot be "
        "checked against them: log a literal, or add the forwarding function to "
        "FORWARDERS and its builder to MESSAGE_BUILDERS in this file"
    )


@pytest.mark.parametrize("line", library_log_lines()[0], ids=lambda line: line.where)
def test_the_log_table_lists_the_line(line: LogLine) -> None:
    """The operations page has a row at the line's level showing its message."""
    pattern = line.pattern()
    rows = log_rows()
    shown = [span for level, spans in rows if level == line.level for span in spans]
    assert any(pattern.fullmatch(span) for span in shown), (
        f"{line.where} logs {line.level} {line.text()!r}, which no row of the log tables "
        f"in docs/operations.md shows: add a row `| {line.level} | `<the message with "
        "example values>` | … |` under its package"
    )


def release_tags(dist: str) -> list[str]:
    """The release tags of a distribution (``sched-lock-v0.1.0``), if git can tell."""
    try:
        result = subprocess.run(
            ["git", "tag", "--list", f"{dist}-v*"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
    except (OSError, subprocess.CalledProcessError):
        return []
    return result.stdout.split()


@pytest.mark.parametrize("dist", DISTS)
def test_changelog_versions_are_releases(dist: str) -> None:
    """A changelog has an "Unreleased" section, and a version section only once it is tagged."""
    text = (ROOT / "packages" / dist / "CHANGELOG.md").read_text(encoding="utf-8")
    sections = re.findall(r"^## \[?([^\]\s]+)", text, re.M)
    assert "Unreleased" in sections
    tags = release_tags(dist)
    untagged = [s for s in sections if s != "Unreleased" and f"{dist}-v{s}" not in tags]
    assert [] == untagged, (
        f"{dist}'s changelog names versions that were never tagged: keep the changes "
        "under '## Unreleased' until the release"
    )


@pytest.mark.parametrize("dist", DISTS)
def test_page_says_how_to_install_before_the_first_release(dist: str) -> None:
    """Until a distribution is tagged, its page installs it from a clone of the repository."""
    if release_tags(dist):
        pytest.skip(f"{dist} has been released")
    page = (DOCS / "packages" / f"{dist}.md").read_text(encoding="utf-8")
    assert f"./sched/packages/{dist}" in page, (
        f"pip cannot install {dist} from the index before its first release: the page "
        "must show how to install it from a clone of the repository"
    )


@pytest.mark.parametrize(
    "path",
    sorted([*(ROOT / "packages").glob("*/README.md"), *(ROOT / "packages").glob("*/CHANGELOG.md")]),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_the_spec_is_not_mentioned(path: Path) -> None:
    """A reader does not know "the spec": say "the Go library"."""
    found = re.findall(r".*\b[Tt]he spec\b.*", path.read_text(encoding="utf-8"))
    assert [] == found, "say 'the Go library' (github.com/cplieger/scheduler, v4) instead"


#: Every page a reader sees: the site's pages, the repository's and the packages' READMEs.
READER_PAGES = sorted(
    [
        *(p for p in DOCS.rglob("*.md") if not {"_build", "performance"} & set(p.parts)),
        ROOT / "README.md",
        *(ROOT / "packages").glob("*/README.md"),
    ]
)


def prose(path: Path) -> str:
    """A page's text without its fenced code blocks."""
    text = path.read_text(encoding="utf-8")
    return re.sub(r"^(```+)[^\n]*\n.*?^\1[ \t]*$", "", text, flags=re.M | re.S)


def code_of(path: Path) -> str:
    """The code a page shows: its fenced blocks, or the whole file for an example."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        return text
    fences = re.finditer(r"^(```+)[^\n]*\n(.*?)^\1[ \t]*$", text, re.M | re.S)
    return "\n".join(m[2] for m in fences)


@pytest.mark.parametrize("path", READER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_code_span_is_glued_to_a_word(path: Path) -> None:
    """An inline code span followed by letters renders apart from them (`` `docker exec`s ``
    shows as "docker exec s"): reword ("runs with `docker exec`")."""
    text = prose(path)
    glued = [
        text[m.start() : m.end() + 3]
        for m in re.finditer(r"`[^`]+`", text)
        if re.match(r"\w", text[m.end() : m.end() + 1])
    ]
    assert [] == glued


NUMBERS = {"ten": 10, "fifteen": 15, "twenty": 20, "twenty-five": 25, "thirty": 30, "forty": 40}


@pytest.mark.parametrize("path", READER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_heading_that_counts_lines_is_true(path: Path) -> None:
    """ "X in N lines": the first code block under the heading has at most N lines of code."""
    text = path.read_text(encoding="utf-8")
    wrong = []
    for heading in re.finditer(r"^#+ .*\bin ([\w-]+) lines\b.*$", text, re.M | re.I):
        word = heading[1].lower()
        count = int(word) if word.isdigit() else NUMBERS[word]
        block = re.search(r"^(```+)[^\n]*\n(.*?)^\1[ \t]*$", text[heading.end() :], re.M | re.S)
        assert block is not None, heading[0]
        code = [
            line.removeprefix(">>> ").removeprefix("... ")
            for line in block[2].splitlines()
            if line.startswith((">>> ", "... ")) or "{doctest}" not in block[0]
        ]
        shown = len([line for line in code if line.strip()])
        if shown > count:
            wrong.append(f"{heading[0]!r}: {shown} lines of code")
    assert [] == wrong


EXAMPLES = sorted((DOCS / "examples").glob("*.py"))


@pytest.mark.parametrize("path", READER_PAGES + EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_names_that_collide_are_module_qualified(path: Path) -> None:
    """Pages and examples use the Go library's names module-qualified, as Go code does:
    ``import sched_trigger as trigger`` then ``trigger.Outcome`` (never ``from sched_trigger
    import``), and ``sched_exclusive``'s ``Outcome`` as ``exclusive.Outcome``, so that
    neither ``Outcome`` (an enum here, a result there) nor ``trigger.Event`` (a wire event)
    reads as another one."""
    code = code_of(path)
    found = re.findall(r"from sched_trigger import [^\n]+", code)
    found += [
        m[0]
        for m in re.finditer(r"from sched_exclusive import ([^\n]+)", code)
        if re.search(r"\bOutcome\b", m[1])
    ]
    assert [] == found, "write `import sched_trigger as trigger` (`trigger.Outcome`, ...)"
