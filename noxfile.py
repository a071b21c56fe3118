"""Every check of the sched monorepo.

The matrix is driven by data: the package folders under ``packages/`` that
have a ``pyproject.toml``, and the Python versions they declare in their
classifiers. A package joins every session the moment its folder lands.

One helper (`_install`) decides what a session gets; the sessions are thin.
Our own distributions are installed from the local tree (or the local
wheelhouse in ``build``) with ``--no-deps`` and never resolved from an index,
so a same-named project on an index can never be picked up; third-party test
tools come from each package's ``test`` dependency group.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import nox
from packaging.requirements import Requirement
from packaging.version import Version

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_venv = "yes"

ROOT = Path(__file__).parent
PACKAGES_DIR = ROOT / "packages"
DOCS = ROOT / "docs"
DEMO = DOCS / "examples" / "demo.py"
INTEGRATION = ROOT / "tests-integration"
BENCH = ROOT / "bench"
WHEELHOUSE = ROOT / "dist"

#: The one Python that runs the slow suites (stress, soak, wheels, docs).
MAIN_PYTHON = "3.12"


def _pyproject(folder: Path) -> dict[str, Any]:
    with (folder / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def _discover() -> dict[str, Path]:
    """Map import name (``sched_lock``) to package folder, for folders that exist."""
    found = {}
    for folder in sorted(PACKAGES_DIR.glob("*/pyproject.toml")):
        found[folder.parent.name.replace("-", "_")] = folder.parent
    return found


PACKAGES = _discover()


def _pythons() -> list[str]:
    """The Python versions every package declares in its classifiers."""
    versions: set[str] = set()
    for folder in PACKAGES.values():
        for classifier in _pyproject(folder)["project"].get("classifiers", []):
            match = re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", classifier)
            if match:
                versions.add(match[1])
    return sorted(versions, key=Version) or [MAIN_PYTHON]


PYTHONS = _pythons()
PACKAGE_PARAMS = [nox.param(name, id=name) for name in PACKAGES]


def _local_requirements(name: str) -> Iterator[str]:
    """Yield the import names of the sibling packages *name* declares, recursively.

    A declared sibling must exist in the tree and its local version must
    satisfy the declared range: the tests then run against exactly what a
    user's resolver would pick.
    """
    project = _pyproject(PACKAGES[name])["project"]
    for spec in project.get("dependencies", []):
        req = Requirement(spec)
        dep = req.name.lower().replace("-", "_")
        if not dep.startswith("sched_"):
            continue
        if dep not in PACKAGES:
            raise RuntimeError(f"{name} declares {spec!r}, which is not in packages/")
        version = _pyproject(PACKAGES[dep])["project"]["version"]
        if not req.specifier.contains(version, prereleases=True):
            raise RuntimeError(f"{name} declares {spec!r}; the local {dep} is {version}")
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
    groups = _pyproject(PACKAGES[name]).get("dependency-groups", {})
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
        slow=session.python == MAIN_PYTHON,
    )


@nox.session(python=MAIN_PYTHON)
def integration(session: nox.Session) -> None:
    """Cross-package and cross-process tests with every package installed together."""
    _install(session, PACKAGES, extra=_requirements_file(INTEGRATION / "requirements.txt"))
    _pytest(session, str(INTEGRATION), packages=PACKAGES, slow=True)


@nox.session(python=MAIN_PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole tree."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHONS[0])
def typecheck(session: nox.Session) -> None:
    """mypy --strict over each package's src and tests (one run each), the noxfile,
    the integration tests and the docs' example job runner."""
    _install(session, PACKAGES, extra=["mypy", "nox"])
    for name, folder in PACKAGES.items():
        session.log(f"mypy: {name}")
        session.run("mypy", str(folder / "src" / name), str(folder / "tests"))
    session.run("mypy", "noxfile.py", "conftest.py")
    if INTEGRATION.exists():
        session.run("mypy", str(INTEGRATION))
    examples = DOCS / "examples"
    if examples.exists():
        session.run("mypy", str(examples))


@nox.session(python=MAIN_PYTHON)
def build(session: nox.Session) -> None:
    """Build every sdist and wheel, check metadata, and test each wheel alone.

    Each wheel goes into a fresh venv with only the sibling wheels it
    declares, from the local wheelhouse; the import must resolve to
    site-packages, the public API must import, and the package's own test
    suite runs against the installed wheel from a copy outside the tree.
    """
    session.install("build", "twine", "uv")
    shutil.rmtree(WHEELHOUSE, ignore_errors=True)
    for folder in PACKAGES.values():
        session.run("uv", "build", "--quiet", "--out-dir", str(WHEELHOUSE), str(folder))
    artifacts = sorted(str(p) for p in WHEELHOUSE.iterdir() if p.suffix in {".whl", ".gz"})
    session.run("twine", "check", "--strict", *artifacts)
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
            session.run(python, "-m", "pytest", "-p", "no:cacheprovider", "tests", external=True)


def _requirements_file(path: Path) -> list[str]:
    if not path.exists():
        return []
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


@nox.session(python=MAIN_PYTHON)
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


@nox.session(python=MAIN_PYTHON)
def demo(session: nox.Session) -> None:
    """A scripted tour of the example job runner, as real processes."""
    _install(session, PACKAGES, test_tools=False)
    session.run("python", str(DEMO), *session.posargs)


@nox.session(python=MAIN_PYTHON)
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


def _default_sessions() -> list[str]:
    """The default list: every session whose inputs exist. ``bench`` is never in it."""
    sessions = ["lint", "typecheck", "tests", "build"]
    if INTEGRATION.exists() and any(INTEGRATION.glob("test_*.py")):
        sessions.append("integration")
    if (DOCS / "conf.py").exists():
        sessions.append("docs")
    if DEMO.exists():
        sessions.append("demo")
    return sessions


nox.options.sessions = _default_sessions()
