"""Every code example in docs/ is executed here, so breaking one breaks a test.

Three kinds of example exist, and nothing else is allowed:

* ``{doctest}`` blocks in the pages: run here with the standard library's
  ``doctest`` (one namespace per page, the same global setup and option
  flags as ``sphinx-build -b doctest`` in ``nox -s docs``);
* ``{literalinclude}`` of a file under ``docs/examples/``: each such file is
  one this suite runs (the job runner and its command in
  ``test_jobrunner.py``, the demo below);
* plain code fences only for console sessions and the shell, never for
  Python that nothing runs.
"""

from __future__ import annotations

import doctest
import logging
import re
import runpy
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"
CONF = runpy.run_path(str(DOCS / "conf.py"))
#: The pages built (and so checked); a package's page joins once the package has landed.
PAGES = sorted(
    page
    for page in DOCS.rglob("*.md")
    if "_build" not in page.parts
    and page.parent.name not in ("examples", "performance")
    and str(page.relative_to(DOCS).with_suffix("")) not in CONF["_NOT_BUILT"]
)
#: The example files this suite runs: only these may be shown with literalinclude.
EXERCISED = {
    EXAMPLES / "jobrunner.py": "test_jobrunner.py runs every mode and subcommand",
    EXAMPLES / "work.py": "the job runner's command in test_jobrunner.py and the demo",
    EXAMPLES / "demo.py": "test_demo_runs_and_verifies_every_step below",
}
FENCE = re.compile(r"^(?P<fence>```+)(?P<info>[^\n]*)\n(?P<body>.*?)^(?P=fence)\s*$", re.M | re.S)
FLAGS = doctest.ELLIPSIS | doctest.IGNORE_EXCEPTION_DETAIL | doctest.DONT_ACCEPT_TRUE_FOR_1


@pytest.fixture
def isolated_logging() -> Iterator[None]:
    """Undo what a page does to logging (handlers, levels, propagation) once it has run."""
    loggers = [logging.getLogger(), *map(logging.getLogger, list(logging.root.manager.loggerDict))]
    saved = [(lg, lg.handlers[:], lg.level, lg.propagate) for lg in loggers]
    try:
        yield
    finally:
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


def fences(page: Path) -> list[tuple[str, str, int]]:
    """Each fenced block of a page: (info string, body, line number)."""
    text = page.read_text(encoding="utf-8")
    return [
        (m["info"].strip(), m["body"], text.count("\n", 0, m.start()) + 1)
        for m in FENCE.finditer(text)
    ]


def page_id(page: Path) -> str:
    """The page's name relative to docs/."""
    return str(page.relative_to(DOCS))


@pytest.mark.parametrize(
    "page", [p for p in PAGES if any(f[0] == "{doctest}" for f in fences(p))], ids=page_id
)
def test_doctest_blocks_pass(page: Path, isolated_logging: None) -> None:
    """The page's ``{doctest}`` blocks pass, run in order in one namespace."""
    blocks = [(body, line) for info, body, line in fences(page) if info == "{doctest}"]
    namespace: dict[str, object] = {"__name__": "__docs__"}
    exec(CONF["doctest_global_setup"], namespace)
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for body, line in blocks:
        # The namespace is shared on purpose: later blocks build on earlier ones.
        test = doctest.DocTest(
            parser.get_examples(body), namespace, page_id(page), str(page), line, body
        )
        runner.run(test, clear_globs=False)
        namespace = test.globs  # DocTest copies its globals: carry them to the next block
    failures, tried = runner.summarize(verbose=False)
    assert 0 == failures, f"{failures} of {tried} examples failed in {page_id(page)}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_python_that_nothing_runs(page: Path) -> None:
    """Python appears only as doctest blocks or literalincludes, never as a bare fence."""
    bare = [line for info, _, line in fences(page) if info in ("python", "py", "python3", "")]
    assert [] == bare, f"unexecuted code fences at lines {bare} of {page_id(page)}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_literalincludes_show_files_the_tests_run(page: Path) -> None:
    """Each literalinclude shows an example file that this suite executes."""
    for info, body, line in fences(page):
        if not info.startswith("{literalinclude}"):
            continue
        target = (page.parent / info.removeprefix("{literalinclude}").strip()).resolve()
        assert target in EXERCISED, f"{page_id(page)}:{line}: {target} is run by no test"
        for option in re.findall(r"^:pyobject:\s*(\S+)", body, re.M):
            source = target.read_text(encoding="utf-8")
            name = option.rpartition(".")[2]
            assert re.search(rf"^\s*(async )?(def|class) {name}\b", source, re.M), option


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
