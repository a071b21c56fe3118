"""Every check of the sched monorepo.

The matrix is data: the package folders under ``packages/`` and the Python
versions their classifiers name. One helper (`_install`) decides what a
session gets; the sessions are thin. Our own distributions come from the
local tree (or the local wheelhouse) with ``--no-deps``, never from an index;
every third-party tool comes pinned from ``constraints.txt`` (``nox -s lock``
writes it), so a tool's release cannot change a run without a commit.

Interpreters: the ``tests`` matrix names every supported version; the other
sessions are not about a version and run on ``HOST_PYTHON``, 3.12 when
present, else the newest supported version present. Locally a missing
version's test sessions are skipped, with one note at the end of the run;
under CI (``CI`` set) a missing version is an error and nothing moves.

Each check runs once per ``nox``: a package's suite on every Python under
coverage; its slow suites (stress, soak, the interrupt sweeps) once, on
``HOST_PYTHON``, without coverage; the docs checks and the demo in ``docs``.
``coverage`` (last) combines the test sessions' data and enforces each
package's floor.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import functools
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import nox
from packaging.version import Version

ROOT = Path(__file__).parent
TOOLS = ROOT / "tools"
sys.path.insert(0, str(TOOLS))
from monorepo import (  # noqa: E402
    LINT_REQUIREMENTS,
    TOOLS_REQUIREMENTS,
    TYPECHECK_REQUIREMENTS,
    discover,
    pyproject,
    requirements_file,
    siblings,
    tool_requirements,
)

nox.needs_version = ">=2025.5.1"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_venv = "yes"
# A missing interpreter is reported, never fetched behind the user's back.
nox.options.download_python = "never"

PACKAGES = discover(ROOT / "packages")
DOCS = ROOT / "docs"
INTEGRATION = ROOT / "tests-integration"
TYPING = ROOT / "tests-typing"
BENCH = ROOT / "bench"
WHEELHOUSE = ROOT / "dist"
COVERAGE = ROOT / ".nox" / "coverage-data"
#: Every tool any session installs, pinned (uv reads the variables; pip the last one).
CONSTRAINTS = ROOT / "constraints.txt"
for _variable in ("UV_CONSTRAINT", "UV_BUILD_CONSTRAINT", "PIP_CONSTRAINT"):
    os.environ[_variable] = str(CONSTRAINTS)
#: Selects the PostgreSQL tests: they run in ``postgres``, never in ``tests``.
POSTGRES_TESTS = "postgres or Postgres"

# --- interpreters --------------------------------------------------------------------------

#: The Python of every session that is not about a version, when it is present.
MAIN_PYTHON = "3.12"
IN_CI = "CI" in os.environ
nox.options.error_on_missing_interpreters = IN_CI
PYTHONS = sorted(
    {
        match[1]
        for folder in PACKAGES.values()
        for classifier in pyproject(folder)["project"].get("classifiers", [])
        if (match := re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", classifier))
    },
    key=Version,
)


def _present(versions: Iterable[str]) -> list[str]:
    """The *versions* whose ``pythonX.Y`` on PATH runs and says so (all probed at once:
    a pyenv shim for a version pyenv is not told to use exists, and fails)."""
    probe = "import sys; print('%d.%d' % sys.version_info[:2])"
    runs = {
        v: subprocess.Popen([found, "-c", probe], stdout=subprocess.PIPE, text=True)
        for v in versions
        if (found := shutil.which(f"python{v}"))
    }
    return [v for v, run in runs.items() if run.communicate()[0].strip() == v]


PRESENT = PYTHONS if IN_CI else _present(PYTHONS)
MISSING = [v for v in PYTHONS if v not in PRESENT]
HOST_PYTHON = MAIN_PYTHON if IN_CI or MAIN_PYTHON in PRESENT or not PRESENT else PRESENT[-1]


def _and(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


_NOTES: list[str] = []


def _one_note(record: logging.LogRecord) -> bool:
    """nox warns "Missing interpreters will error by default on CI systems." once per
    session it skips for want of an interpreter: one note at the end of the run (after
    nox's summary, on stderr) stands for them all."""
    if not record.getMessage().startswith("Missing interpreters will error"):
        return True
    if not _NOTES:
        skipped = "their test sessions were skipped" if PRESENT else "every session was skipped"
        if PRESENT and HOST_PYTHON != MAIN_PYTHON:
            skipped += f" and the other sessions ran on {HOST_PYTHON}"
        note = (
            f"nox > Python {_and(MISSING)} not found: {skipped}. With pyenv, run"
            f" `export PYENV_VERSION={':'.join(PYTHONS)}` first (and `pyenv install"
            f" {' '.join(MISSING)}` if `pyenv versions` lacks them); otherwise put"
            f" {_and([f'python{v}' for v in MISSING])} on PATH."
        )
        _NOTES.append(note)
        atexit.register(print, note, file=sys.stderr)
    return False


logging.getLogger("nox").addFilter(_one_note)

# --- what a session gets -------------------------------------------------------------------


def _local_requirements(name: str) -> Iterator[str]:
    """The import names of the sibling packages *name* declares, recursively (each must
    be in the tree, its version in the declared range: ``monorepo.siblings``)."""
    for _, folder in siblings(PACKAGES[name]):
        dep = folder.name.replace("-", "_")
        yield dep
        yield from _local_requirements(dep)


def _closure(names: Iterable[str]) -> list[str]:
    """*names* and every sibling they declare, each once, dependencies first."""
    ordered: list[str] = []
    for name in names:
        for dep in [*reversed(list(_local_requirements(name))), name]:
            if dep not in ordered:
                ordered.append(dep)
    return ordered


def _test_group(name: str) -> list[str]:
    return list(pyproject(PACKAGES[name]).get("dependency-groups", {}).get("test", []))


def _install(
    session: nox.Session,
    names: Iterable[str],
    *,
    test_tools: bool = True,
    extra: Iterable[str] = (),
) -> list[str]:
    """Install packages (editable, from the tree), the siblings they declare, and the
    tools of their ``test`` groups plus *extra*. Returns the installed import names."""
    names = _closure(names)
    session.install("--no-deps", *[arg for n in names for arg in ("-e", str(PACKAGES[n]))])
    tools = sorted({t for n in names if test_tools for t in _test_group(n)} | set(extra))
    if tools:
        session.install(*tools)
    return names


def _pytest(session: nox.Session, *args: str, packages: Iterable[str], slow: bool) -> None:
    """Run pytest under coverage of *packages*, the slow suites left out; with *slow*, run
    those once more, alone and without coverage (it adds nothing to them, at a high cost).

    After the main run, not beside it on a second core: the stress suites then starve
    tests that time a loop's ticks (tried: the PostgreSQL tick test, a ±5 ms bound,
    failed 3 runs in 3 so; alone on the same loaded machine, 2 in 6).

    The data goes to ``.nox/coverage-data/``, for ``nox -s coverage`` to combine and report.
    """
    COVERAGE.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^\w.-]+", "_", session.name)
    env = {"COVERAGE_FILE": str(COVERAGE / f".coverage.{name}")}
    session.run("coverage", "erase", env=env)
    source = f"--source={','.join(packages)}"
    # Exit status 5: nothing selected, as when the arguments pick only slow tests (or
    # only others); with both runs, one of them has something to do.
    done = [0, 5] if slow else [0]
    session.run(
        "coverage", "run", source, "-m", "pytest", "-m", "not slow", *args, env=env,
        success_codes=done,
    )  # fmt: skip
    if slow:
        session.run("pytest", "-m", "slow", *args, success_codes=done)


# --- sessions ------------------------------------------------------------------------------


@nox.session(python=HOST_PYTHON)
def lint(session: nox.Session) -> None:
    """Lint: ruff check and format --check, the private-attribute linter, actionlint."""
    session.install(*LINT_REQUIREMENTS)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    checked = [
        *("packages", "testing", "tests-integration", "tests-typing", "tools", "bench"),
        "docs/examples",
    ]
    session.run("python", str(TOOLS / "private_attributes.py"), *checked, "noxfile.py")
    session.run("actionlint", *sorted(str(p) for p in ROOT.glob(".github/workflows/*.yml")))


@nox.session(python=HOST_PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict over every package, the noxfile, tools, tests and tests-typing.

    Each package's src and tests in one run each; tests-typing/ holds right uses
    of the public API mypy must accept and wrong uses (typos, subclassed final
    classes) it must reject.
    """
    _install(session, PACKAGES, extra=TYPECHECK_REQUIREMENTS)
    for name, folder in PACKAGES.items():
        session.log(f"mypy: {name}")
        session.run("mypy", str(folder / "src" / name), str(folder / "tests"))
    shared = ["noxfile.py", "conftest.py", str(TOOLS), str(ROOT / "testing")]
    for target in [shared, [str(INTEGRATION)], [str(TYPING)], [str(DOCS / "examples")]]:
        session.run("mypy", *target)


@nox.session(python=PYTHONS)
@nox.parametrize("package", [nox.param(name, id=name) for name in PACKAGES])
def tests(session: nox.Session, package: str) -> None:
    """One package's tests on one Python, with only what it declares installed."""
    _install(session, [package])
    _pytest(
        session,
        str(PACKAGES[package] / "tests"),
        "-k",
        f"not ({POSTGRES_TESTS})",
        *session.posargs,
        packages=[package],
        slow=session.python == HOST_PYTHON,
    )


@nox.session(python=HOST_PYTHON)
def postgres(session: nox.Session) -> None:
    """sched-exclusive's PostgreSQL backend: its tests start a throw-away cluster (and
    PgBouncer, and a network namespace) themselves; they need PostgreSQL installed.

    The slow suites (the interrupt sweeps among them) run once more, without coverage,
    as in every test session.
    """
    installed = shutil.which("initdb") or any(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not installed and not IN_CI:
        session.skip("PostgreSQL is not installed (no initdb; apt install postgresql)")
    _install(session, ["sched_exclusive"])
    # This session needs PostgreSQL: a test that cannot get its server fails.
    session.env["SCHED_TEST_POSTGRES_REQUIRED"] = "1"
    _pytest(
        session,
        str(PACKAGES["sched_exclusive"] / "tests"),
        "-k",
        POSTGRES_TESTS,
        *session.posargs,
        packages=["sched_exclusive"],
        slow=True,
    )


@nox.session(python=HOST_PYTHON)
def wheelhouse(session: nox.Session) -> None:
    """Every sdist and wheel into dist/, metadata checked: the README's wheelhouse."""
    session.install("uv", "twine")
    shutil.rmtree(WHEELHOUSE, ignore_errors=True)
    for folder in PACKAGES.values():
        session.run("uv", "build", "--quiet", "--out-dir", str(WHEELHOUSE), str(folder))
    artifacts = sorted(str(p) for p in WHEELHOUSE.iterdir() if p.suffix in {".whl", ".gz"})
    session.run("twine", "check", "--strict", *artifacts)


@nox.session(python=HOST_PYTHON, requires=["wheelhouse"])
def build(session: nox.Session) -> None:
    """After wheelhouse: the README's install commands, then each wheel tested alone.

    The README's "Before the first release" commands run as written, each in
    a fresh venv (``tools/readme_installs.py``), and what they install must
    import. Each wheel then goes into a fresh venv with only the sibling
    wheels it declares, from the local wheelhouse; the import must resolve to
    site-packages, the public API must import, and the package's own test
    suite (the slow suites and PostgreSQL aside) runs against the installed
    wheel from a copy outside the tree.
    """
    session.install("uv")
    # The README's commands and the wheels' suites are independent: two at a time, one
    # per core of a CI machine (each one's output is shown when it fails). The wheelhouse
    # session already ran: its `nox -s` line is not run again.
    readme = ("python", str(TOOLS / "readme_installs.py"), "--this-session", "wheelhouse")
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        installs = pool.submit(session.run, *readme, silent=True)
        outcomes = list(pool.map(functools.partial(_test_wheel, session), PACKAGES))
        installs.result()
    session.log("the README's install commands: each ran, and what it installed imports")
    for name, outcome in zip(PACKAGES, outcomes, strict=True):
        session.log(f"{name} wheel: {outcome}")


def _test_wheel(session: nox.Session, name: str) -> str:
    """Test one wheel alone in a fresh venv; return its suite's summary line."""
    with tempfile.TemporaryDirectory(prefix=f"wheel-{name}-") as tmp:
        work = Path(tmp)
        venv = work / "venv"
        python = str(venv / "bin" / "python")
        run = functools.partial(session.run, silent=True)
        run("uv", "venv", "--quiet", "--python", f"python{session.python}", str(venv))
        # Wheels only, from the wheelhouse only: sibling dependencies resolve there and
        # nowhere else. --no-cache: a rebuilt wheel keeps its file name, and a cached
        # copy of an older build must never stand in for it.
        pip = ("uv", "pip", "install", "--quiet", "--python", python)
        dist = name.replace("_", "-")
        run(*pip, "--no-cache", "--no-index", "--find-links", str(WHEELHOUSE), dist)
        run(*pip, *_test_group(name))
        for tests in (PACKAGES[name] / "tests", ROOT / "testing"):  # the suite, the shared kit
            shutil.copytree(tests, work / tests.name)
        for shared in ("pyproject.toml", "conftest.py"):
            shutil.copy(ROOT / shared, work / shared)
        check = (
            f"import {name}, sys\n"
            f"assert 'site-packages' in {name}.__file__, {name}.__file__\n"
            f"missing = [n for n in {name}.__all__ if not hasattr({name}, n)]\n"
            f"assert not missing, missing\n"
        )
        run(python, "-I", "-c", check, external=True)
        # -I: nothing of this tree (the working directory) on sys.path; the copy is the
        # rootdir, its conftest and settings the ones used.
        output = run(
            python, "-I", "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(work),
            "-c", str(work / "pyproject.toml"), "-m", "not slow",
            "-k", f"not ({POSTGRES_TESTS})", str(work / "tests"), external=True,
        )  # fmt: skip
        return str(output).strip().splitlines()[-1].strip("= ")


@nox.session(python=HOST_PYTHON)
def integration(session: nox.Session) -> None:
    """Cross-package and cross-process tests, every package installed (docs checks aside).

    ``docs`` runs tests-integration/test_docs_* against the site it builds.
    """
    _install(session, PACKAGES, extra=requirements_file(INTEGRATION / "requirements.txt"))
    session.run("pytest", str(INTEGRATION), "--ignore-glob=*/test_docs_*.py", *session.posargs)


@nox.session(python=HOST_PYTHON)
def docs(session: nox.Session) -> None:
    """The docs site (-n -W), then the built site, the pages' examples and the demo checked.

    Every reference must resolve and every warning is an error; then
    tests-integration/test_docs_* check the built site and run every example.
    """
    _install(
        session, PACKAGES, test_tools=False, extra=requirements_file(DOCS / "requirements.txt")
    )
    html = DOCS / "_build" / "html"
    session.run(
        "sphinx-build", "-j", "auto", "-n", "-W", "--keep-going", "-b", "html", str(DOCS), str(html)
    )
    # --noconftest: these checks need none of the suite's fixtures (nor Hypothesis).
    tests = sorted(str(p) for p in INTEGRATION.glob("test_docs_*.py"))
    session.run(
        "pytest", "--noconftest", *tests, *session.posargs, env={"SCHED_DOCS_HTML": str(html)}
    )


@nox.session(python=HOST_PYTHON)
def tools(session: nox.Session) -> None:
    """The tests of tools/: interpreters, pins, floors, release, README installs, linter."""
    session.install("pytest", "pytest-timeout", "hypothesis", *TOOLS_REQUIREMENTS)
    session.run("pytest", str(TOOLS / "tests"), *session.posargs, env={"PYTHONPATH": str(TOOLS)})


@nox.session(python=HOST_PYTHON)
def coverage(session: nox.Session) -> None:
    """Each package's coverage, combined over every test session, held to its floor.

    Every Python's run and ``postgres`` count; the report is printed once.

    The floors live in the root ``pyproject.toml`` (``[tool.sched.coverage-floors]``).
    A package without data fails under CI, and is named and passed over elsewhere.
    """
    session.install(*TOOLS_REQUIREMENTS)
    if not any(COVERAGE.glob(".coverage.*")):
        session.error("no coverage data: run the test sessions first (nox -s tests coverage)")
    # Combined away from the sessions' files: a report next to them would combine
    # them again, and delete them.
    data = Path(session.create_tmp()) / ".coverage"
    session.run("coverage", "combine", "--keep", "--quiet", f"--data-file={data}", str(COVERAGE))
    session.run("coverage", "report", f"--data-file={data}")
    session.run("python", str(TOOLS / "coverage_floors.py"), str(data), *(["--ci"] * IN_CI))


# --- not in the default list ---------------------------------------------------------------


@nox.session(python=HOST_PYTHON, default=False)
def demo(session: nox.Session) -> None:
    """A scripted tour of the example job runner, as real processes (``docs`` checks it)."""
    _install(session, PACKAGES, test_tools=False)
    session.run("python", str(DOCS / "examples" / "demo.py"), *session.posargs)


@nox.session(python=HOST_PYTHON, default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks against their floors and peers, measured in one run."""
    extra = requirements_file(BENCH / "requirements.txt")
    _install(session, PACKAGES, test_tools=False, extra=extra)
    out = DOCS / "performance"
    out.mkdir(parents=True, exist_ok=True)
    for script in sorted(BENCH.glob("bench_*.py")):
        target = out / f"{script.stem.removeprefix('bench_')}.md"
        session.run("python", str(script), "--output", str(target), *session.posargs)


@nox.session(python=HOST_PYTHON, default=False)
def release(session: nox.Session) -> None:
    """Check and build one distribution for release: `nox -s release -- sched-lock` (dry run).

    With a tag instead (``-- sched-lock-v0.2.0``) the checks are the release's
    own: the release workflow runs this session. See ``tools/release.py``.
    """
    if not session.posargs:
        session.error("name a distribution (a dry run) or a tag: nox -s release -- sched-lock")
    session.install(*TOOLS_REQUIREMENTS)
    session.run("python", str(TOOLS / "release.py"), *session.posargs)


@nox.session(python=HOST_PYTHON, default=False)
def lock(session: nox.Session) -> None:
    """Rewrite constraints.txt: every tool of every session, pinned (-- --upgrade: newest).

    Resolved once for every supported Python (``uv pip compile --universal``).
    """
    session.install("uv")
    with tempfile.TemporaryDirectory(prefix="sched-lock-") as tmp:
        source = Path(tmp) / "tools.in"
        source.write_text("\n".join(tool_requirements()) + "\n")
        session.run(
            "uv", "pip", "compile", "--quiet", "--universal", f"--python-version={PYTHONS[0]}",
            "--no-header", "--no-annotate", str(source), "-o", str(CONSTRAINTS), *session.posargs,
            env={"UV_CONSTRAINT": ""},
        )  # fmt: skip
    body = CONSTRAINTS.read_text()
    CONSTRAINTS.write_text(
        "# Every tool every nox session installs, pinned: `nox -s lock` writes this file\n"
        "# from the packages' test groups, the requirements files and the noxfile's tool\n"
        "# lists (`nox -s lock -- --upgrade` moves each to its newest release).\n" + body
    )
