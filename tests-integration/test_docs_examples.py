"""Every code block of the docs is checked here, so a page cannot drift from the code.

A page (a Markdown file under ``docs/``) may show code in four ways, and no other:

``{doctest}``
    A Python session. It must be *complete*: pasted into a file on its own
    (what the copy button copies: the ``>>>``/``...`` lines, without prompts
    or output), it runs to the end. So it imports everything it uses, defines
    its helpers, and catches the exceptions it shows. Each block is run
    twice: as a doctest in a fresh namespace (its shown output must match,
    ``...`` standing for any text), and pasted into a file, by a fresh
    ``python``. Both run in a directory holding a copy of ``docs/examples/``,
    as a reader following the page would (``import jobrunner`` works).
``console``
    Command lines (``$ `` lines) with their real output, run by the small
    runner below: the page's blocks run in order in one ``bash``, in a fresh
    directory holding a copy of ``docs/examples/`` (so ``python jobrunner.py``
    works, and an ``export`` holds for the rest of the page). A command sees
    its stdout and stderr merged, in the order they were written (as a
    terminal shows them; ``PYTHONUNBUFFERED=1`` keeps that order through a
    pipe). What it prints must match the lines shown under it, line by line,
    with only these normalisations, each visible on the page as written:

    * trailing white space is ignored;
    * ``<pid>`` stands for a process id, ``<timestamp>`` for an RFC 3339 UTC
      time (``2026-12-02T13:05:09.5Z``), ``<duration>`` for a Go duration
      (``12.5ms``, ``0s``).

    To show an exit status, show it the way a shell does: ``$ echo $?``.
    An HTML comment on the line before the block changes how it is run:

    * ``<!-- console: not run: REASON -->``: the block is not run (an
      install line, a clone, ``nox``); say why.
    * ``<!-- console: background -->``: the block's one command is started
      on its own (a second terminal, say a daemon) in the page's directory;
      the runner waits until it has printed the lines shown under it, runs
      the rest of the page, then sends it SIGTERM, and it must exit 0.
``python``
    An excerpt of a file under ``docs/examples/`` (which the integration
    tests run), shown inline so the page reads well where ``literalinclude``
    shows nothing (a code host's Markdown view). The line before the block
    names what it shows: ``<!-- excerpt: examples/jobrunner.py main_run -->``
    (a top-level function or class, or ``Class.method``), or the whole file
    without a name. The block must equal that code. An excerpt alone does not
    run, so the visible line above the marker says which file it comes from
    and links to it (``From [`docs/examples/jobrunner.py`](examples/jobrunner.py):``):
    on a code host the link opens the file, on the built site it downloads it.
``text``
    A diagram or a file's content; nothing to run.

Every line of a code block fits in the formatter's width (ruff's
``line-length`` in the root ``pyproject.toml``), so that no reader has to
scroll sideways.
"""

from __future__ import annotations

import ast
import difflib
import doctest
import logging
import os
import queue
import re
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"
CONF = runpy.run_path(str(DOCS / "conf.py"))
#: The pages built (and so checked).
PAGES = sorted(
    page
    for page in DOCS.rglob("*.md")
    if "_build" not in page.parts and page.parent.name not in ("examples", "performance")
)
#: The widest code line a page may show: the formatter's width.
with (ROOT / "pyproject.toml").open("rb") as _f:
    LINE_LIMIT: int = tomllib.load(_f)["tool"]["ruff"]["line-length"]
#: Upper bound for one example or one command; they take well under a second.
DEADLINE = 60.0
FENCE = re.compile(r"^(?P<fence>```+)(?P<info>[^\n]*)\n(?P<body>.*?)^(?P=fence)\s*$", re.M | re.S)
MARKER = re.compile(r"<!--\s*(?P<kind>console|excerpt):\s*(?P<value>.*?)\s*-->\s*$")
FLAGS = doctest.ELLIPSIS | doctest.DONT_ACCEPT_TRUE_FOR_1
#: What a console block's output may say in place of a value that changes from run to run.
PLACEHOLDERS = {
    "<pid>": r"\d+",
    "<timestamp>": r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z",
    "<duration>": r"-?(?:(?:\d+(?:\.\d+)?(?:h|m|s|ms|µs|us|ns))+|0s)",
}
#: The info strings a code block may have.
KINDS = ("{doctest}", "console", "python", "text")
#: Directives that are not code a reader copies.
STRUCTURE = ("{toctree}", "{eval-rst}", "{include}")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int
    info: str
    body: str
    marker: tuple[str, str] | None  # (kind, value) of an HTML comment on the line before

    @property
    def id(self) -> str:
        """``packages/sched-lock.md:42``: where to look."""
        return f"{self.page.relative_to(DOCS)}:{self.line}"

    def pasted(self) -> str:
        """What the copy button copies (as conf.py sets it up): prompted lines, unprompted."""
        prompt = re.compile(CONF["copybutton_prompt_text"])
        lines = [line[m.end() :] for line in self.body.splitlines() if (m := prompt.match(line))]
        return "\n".join(lines) + "\n"


def blocks(page: Path) -> list[Block]:
    """Each fenced block of a page, with the marker comment that precedes it, if any."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rpartition("\n")[2]
        marker = MARKER.search(before)
        found.append(
            Block(
                page,
                line,
                match["info"].strip(),
                match["body"],
                (marker["kind"], marker["value"]) if marker else None,
            )
        )
    return found


ALL_BLOCKS = [block for page in PAGES for block in blocks(page)]
DOCTESTS = [b for b in ALL_BLOCKS if b.info == "{doctest}"]
EXCERPTS = [b for b in ALL_BLOCKS if b.info == "python"]
CONSOLE_PAGES = [p for p in PAGES if any(b.info == "console" for b in blocks(p))]


def block_id(block: Block) -> str:
    """The test id of a block."""
    return block.id


def page_id(page: Path) -> str:
    """The page's name relative to docs/."""
    return str(page.relative_to(DOCS))


@pytest.fixture
def reader_dir() -> Iterator[Path]:
    """A fresh directory holding a copy of docs/examples/, where a reader would work."""
    with tempfile.TemporaryDirectory(prefix="sched-docs-") as tmp:
        for example in EXAMPLES.glob("*.py"):
            shutil.copy(example, tmp)
        yield Path(tmp)


@pytest.fixture
def isolated_process_state(reader_dir: Path) -> Iterator[None]:
    """Undo what an in-process example does to logging, the environment and the cwd."""
    loggers = [logging.getLogger(), *map(logging.getLogger, list(logging.root.manager.loggerDict))]
    saved = [(lg, lg.handlers[:], lg.level, lg.propagate) for lg in loggers]
    environ, cwd, path = dict(os.environ), Path.cwd(), sys.path[:]
    os.chdir(reader_dir)
    sys.path.insert(0, str(reader_dir))
    # Records an example does not show go nowhere, not to stderr via logging.lastResort.
    null = logging.NullHandler()
    logging.getLogger().addHandler(null)
    try:
        yield
    finally:
        os.chdir(cwd)
        sys.path[:] = path
        sys.modules.pop("jobrunner", None)
        os.environ.clear()
        os.environ.update(environ)
        known = {id(lg) for lg in loggers}
        for name in list(logging.root.manager.loggerDict):
            logger = logging.getLogger(name)
            if id(logger) not in known:
                logger.handlers[:] = []
                logger.setLevel(logging.NOTSET)
                logger.propagate = True
        for logger, handlers, level, propagate in saved:
            logger.handlers[:] = handlers
            logger.setLevel(level)
            logger.propagate = propagate


# --- which blocks a page may have ------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_block_is_of_a_known_kind(page: Path) -> None:
    """A block is a doctest, a console session, an excerpt, a text diagram, or structure."""
    unknown = [
        f"{b.id}: ```{b.info}"
        for b in blocks(page)
        if b.info not in KINDS and not b.info.startswith(STRUCTURE)
    ]
    assert [] == unknown, (
        "code blocks must be ```{doctest}, ```console, ```python (an excerpt of "
        "docs/examples/) or ```text; literalinclude shows nothing on a code host, so "
        "paste the code as an excerpt instead (see this module's docstring)"
    )


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_code_lines_fit_the_formatters_width(page: Path) -> None:
    """No code line is wider than ruff's line length: nobody scrolls sideways."""
    wide = [
        f"{b.id} (+{n}): {len(line)} characters"
        for b in blocks(page)
        if not b.info.startswith(STRUCTURE)
        for n, line in enumerate(b.body.splitlines(), start=1)
        if len(line) > LINE_LIMIT
    ]
    assert [] == wide, f"wrap these lines at {LINE_LIMIT} characters (prompts included)"


# --- doctest blocks: complete, and correct ---------------------------------------------


@pytest.mark.parametrize("block", DOCTESTS, ids=block_id)
def test_doctest_shows_no_traceback(block: Block) -> None:
    """A pasted block must run to the end: it catches and prints what it shows raising."""
    assert "Traceback (most recent call last)" not in block.body, (
        f"{block.id}: catch the exception and print it (`except X as exc: print(exc)`), "
        "so that the block, pasted into a file, runs to the end"
    )


@pytest.mark.parametrize("block", DOCTESTS, ids=block_id)
def test_doctest_output_matches(block: Block, isolated_process_state: None) -> None:
    """The block's shown output is what it prints, run on its own in a fresh namespace."""
    test = doctest.DocTestParser().get_doctest(
        block.body, {"__name__": "__main__"}, block.id, str(block.page), block.line
    )
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert 0 == runner.failures, (
        f"{block.id}: the block's output differs from what it prints (each block runs "
        "alone, in a fresh namespace: it must import and define what it uses)\n" + "".join(report)
    )


@pytest.mark.parametrize("block", DOCTESTS, ids=block_id)
def test_doctest_runs_pasted_into_a_file(block: Block, reader_dir: Path) -> None:
    """What the copy button copies, saved as a file, runs with a fresh ``python``."""
    script = reader_dir / "pasted.py"
    script.write_text(block.pasted(), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=reader_dir,
        env=reader_env(),
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert 0 == result.returncode, (
        f"{block.id}: pasted into a file on its own, the block fails; it must import "
        f"and define everything it uses:\n{result.stderr}"
    )


# --- python blocks: excerpts of the example files ----------------------------------------


def excerpt_source(path: Path, name: str) -> str:
    """The source of a top-level function or class (or ``Class.method``) of a file."""
    source = path.read_text(encoding="utf-8")
    scope: list[ast.stmt] = ast.parse(source).body
    node: ast.stmt | None = None
    for part in name.split("."):
        node = next(
            (
                n
                for n in scope
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and n.name == part
            ),
            None,
        )
        if node is None:
            pytest.fail(f"{path.name} has no {name}: fix the excerpt marker")
        scope = node.body
    assert node is not None
    lines = source.splitlines()
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    assert node.end_lineno is not None
    return textwrap.dedent("\n".join(lines[start - 1 : node.end_lineno])) + "\n"


@pytest.mark.parametrize("block", EXCERPTS, ids=block_id)
def test_excerpt_equals_the_example_file(block: Block) -> None:
    """A ``python`` block is a verbatim copy of (part of) a file the tests run."""
    kind, value = block.marker or ("", "")
    assert "excerpt" == kind, (
        f"{block.id}: a ```python block must be an excerpt of docs/examples/, with "
        "<!-- excerpt: examples/FILE.py [NAME] --> on the line before it; for an "
        "example that runs on its own, use ```{doctest}"
    )
    file, _, name = value.partition(" ")
    path = (block.page.parent / file).resolve()
    assert path.is_file(), f"{block.id}: no such example: {file}"
    assert EXAMPLES == path.parent, f"{block.id}: {file} is not in docs/examples/"
    expected = excerpt_source(path, name) if name else path.read_text(encoding="utf-8")
    diff = "".join(
        difflib.unified_diff(
            block.body.splitlines(keepends=True),
            expected.splitlines(keepends=True),
            f"{block.id}",
            f"{path.relative_to(ROOT)} {name}".strip(),
        )
    )
    assert expected == block.body, (
        f"{block.id} shows {file} {name} as it no longer is: paste the file's current "
        f"code into the page\n{diff}"
    )


@pytest.mark.parametrize("block", EXCERPTS, ids=block_id)
def test_an_excerpt_says_which_file_it_is_from(block: Block) -> None:
    """An excerpt does not run pasted alone: the line above it names its file, with a link."""
    kind, value = block.marker or ("", "")
    file = value.partition(" ")[0]
    text = block.page.read_text(encoding="utf-8")
    lines = text.splitlines()[: block.line - 2]  # the lines above the marker comment
    above = next((line for line in reversed(lines) if line.strip()), "")
    wanted = f"From [`docs/examples/{Path(file).name}`]({file}):"
    assert ("excerpt", wanted) == (kind, above.strip()), (
        f"{block.id}: write `{wanted}` on its own line above the excerpt marker, so that a "
        "reader who pastes the block knows where the rest of it is"
    )


# --- console blocks: run them -------------------------------------------------------------


def reader_env() -> dict[str, str]:
    """A reader's environment: this interpreter's scripts first on PATH, no job settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOB_", "WORK_"))}
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", os.defpath)])
    env["PYTHONUNBUFFERED"] = "1"  # stdout and stderr keep the order they were written in
    env.pop("PYTHONPATH", None)
    return env


def shown_commands(block: Block) -> list[tuple[str, list[str]]]:
    """The ``$ `` commands of a console block, each with the output lines shown under it."""
    commands: list[tuple[str, list[str]]] = []
    for line in block.body.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        elif commands:
            commands[-1][1].append(line)
        else:
            pytest.fail(f"{block.id}: a console block starts with a `$ ` command line")
    return commands


def line_pattern(shown: str) -> re.Pattern[str]:
    """A shown output line as a pattern: its text, with the placeholders' values allowed."""
    parts = re.split("(" + "|".join(map(re.escape, PLACEHOLDERS)) + ")", shown.rstrip())
    return re.compile("".join(PLACEHOLDERS.get(p, re.escape(p)) for p in parts))


def matches(shown: list[str], actual: list[str]) -> bool:
    """Whether every shown line matches the actual line in its place, and no line is extra."""
    return len(shown) == len(actual) and all(
        line_pattern(s).fullmatch(a.rstrip()) for s, a in zip(shown, actual, strict=True)
    )


class Lines:
    """The output of a process, read line by line in a thread."""

    def __init__(self, stream: object) -> None:
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.queue.put(line.rstrip("\n"))
        self.queue.put(None)

    def close(self, stream: object) -> None:
        """Wait for the end of the output, then close the stream."""
        self.thread.join(timeout=DEADLINE)
        stream.close()  # type: ignore[attr-defined]

    def next(self, what: str) -> str | None:
        """The next line (``None`` at the end); fails after the deadline."""
        try:
            return self.queue.get(timeout=DEADLINE)
        except queue.Empty:
            pytest.fail(f"{what}: no output within {DEADLINE}s")


class Shell:
    """One ``bash`` for a page: commands run in order, and an ``export`` holds for the page."""

    def __init__(self, cwd: Path) -> None:
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=cwd,
            env=reader_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        self.lines = Lines(self.proc.stdout)

    def run(self, command: str) -> list[str]:
        """Run one command line; return what it printed (stdout and stderr, merged)."""
        assert self.proc.stdin is not None
        end = f"__sched_docs_end_{uuid.uuid4().hex}__"
        # The status is kept for the next command's $? (``echo $?``).
        self.proc.stdin.write(
            f"{{ {command}\n}} </dev/null 2>&1; __s=$?; printf '\\n%s\\n' {end}; (exit $__s)\n"
        )
        self.proc.stdin.flush()
        output: list[str] = []
        while (line := self.lines.next(command)) != end:
            if line is None:
                pytest.fail(f"the shell ended during {command!r}: {output}")
            output.append(line)
        while output and not output[-1].strip():
            output.pop()
        return output

    def close(self) -> None:
        """End the shell."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=DEADLINE)
        self.lines.close(self.proc.stdout)


class Background:
    """A console block's command, started on its own, as in a second terminal."""

    def __init__(self, command: str, cwd: Path) -> None:
        self.command = command
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-c", command],  # bash execs a simple command
            cwd=cwd,
            env=reader_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        self.lines = Lines(self.proc.stdout)

    def first_lines(self, count: int) -> list[str]:
        """Wait for the command's first *count* lines of output."""
        got: list[str] = []
        while len(got) < count and (line := self.lines.next(self.command)) is not None:
            got.append(line)
        return got

    def stop(self) -> int:
        """Send SIGTERM (as ``docker stop`` would) and reap; return the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=DEADLINE)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.lines.close(self.proc.stdout)


def mismatch(block: Block, command: str, shown: list[str], actual: list[str]) -> str:
    """The failure message of a command whose output differs from the page."""
    diff = "\n".join(
        difflib.unified_diff(shown, actual, "shown on the page", "printed", lineterm="")
    )
    names = ", ".join(PLACEHOLDERS)
    return (
        f"{block.id}: `$ {command}` printed something else than the page shows. Make "
        f"the page show what it prints ({names} may stand for values that change; "
        f"show an exit status with `$ echo $?`):\n{diff}"
    )


@pytest.mark.parametrize("page", CONSOLE_PAGES, ids=page_id)
def test_console_blocks_print_what_the_page_shows(page: Path, reader_dir: Path) -> None:
    """Each command of each console block prints the lines shown under it."""
    shell = Shell(reader_dir)
    background: list[Background] = []
    try:
        for block in blocks(page):
            if block.info != "console":
                continue
            kind, value = block.marker or ("", "")
            if kind == "console" and value.startswith("not run"):
                assert value.removeprefix("not run").strip(" :"), f"{block.id}: say why not"
                continue
            commands = shown_commands(block)
            if kind == "console" and value == "background":
                assert 1 == len(commands), f"{block.id}: a background block has one command"
                command, shown = commands[0]
                process = Background(command, reader_dir)
                background.append(process)
                actual = process.first_lines(len(shown))
                assert matches(shown, actual), mismatch(block, command, shown, actual)
                continue
            assert block.marker is None, f"{block.id}: unknown marker {block.marker}"
            for command, shown in commands:
                actual = shell.run(command)
                assert matches(shown, actual), mismatch(block, command, shown, actual)
    finally:
        shell.close()
        statuses = [(p.command, p.stop()) for p in background]
    assert [(p.command, 0) for p in background] == statuses, "a background command failed"


# --- the demo ---------------------------------------------------------------------------------


def test_demo_runs_and_verifies_every_step() -> None:
    """``python docs/examples/demo.py`` (what ``nox -s demo`` runs) succeeds, under a minute."""
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "demo.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert 0 == result.returncode, result.stdout + result.stderr
    transcript = result.stdout
    for claim in (
        "a startup run fired at once",
        "the poll found a cycle running and queued a rerun",
        "the runner's log says ran-queued",
        "the ticker fired the next cycle",
        "run_or_skip found the lock busy and skipped",
        "the client saw: queued",
        "the client saw: started",
        "the client saw: done, ok",
        "the job's command got SIGTERM (not SIGKILL) and cleaned up",
        "no new cycle started after SIGTERM",
        "the runner exited with status 0 (got 0)",
    ):
        assert f"✔ {claim}" in transcript
    assert "All shown behaviour verified" in transcript
    # Once mode is the example's choice, not what 0 means to the library.
    assert "zero_as_once=True in jobrunner.py's Config" in transcript
    assert "by the library's default, 0 means external mode" in transcript
