"""What importing each package loads: the costly modules it may load, named, and no other.

The design's budget is 20 ms of start-up per package (``nox -s bench`` measures
it: ``bench/bench_imports.py``). A timing is noisy on a shared machine; what a
package loads is not. So each package names the costly standard-library
modules it may load at import, and a fresh interpreter checks that it loads
no other: a creeping import (``typing`` through one private module) fails
here, with the module named, rather than in a benchmark.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

#: Modules that each cost a millisecond or more to import (docs/performance.md,
#: /work/shared/perf-facts.md), or that pull in a dependency.
COSTLY = frozenset(
    {
        "argparse",
        "asyncio",
        "concurrent.futures",
        "dataclasses",
        "email",
        "enum",
        "fractions",
        "hashlib",
        "importlib.metadata",
        "inspect",
        "json",
        "logging",
        "pathlib",
        "psycopg",
        "random",
        "re",
        "selectors",
        "signal",
        "socket",
        "ssl",
        "subprocess",
        "tempfile",
        "threading",
        "tokenize",
        "traceback",
        "typing",
        "uuid",
        "uvloop",
    }
)
#: The costly modules each import may load; anything else of COSTLY fails the test.
MAY_LOAD: dict[str, frozenset[str]] = {
    "import sched_interval": frozenset({"enum"}),
    "import sched_loop": frozenset({"enum", "random", "re", "signal", "threading", "typing"}),
    "import sched_lock": frozenset(),
    # logging: the coalescing rules log through it (it brings re, traceback, tokenize).
    "import sched_exclusive": frozenset(
        {"enum", "logging", "re", "threading", "tokenize", "traceback"}
    ),
    "import sched_trigger": frozenset(),
    # The client's path, which a docker exec'd trigger pays on every run: a socket and
    # json (which bring enum and re), no asyncio, typing, logging or threading.
    "from sched_trigger import submit": frozenset({"enum", "json", "re", "selectors", "socket"}),
    # subprocess itself (CompletedRun and CommandFailed subclass its classes) brings
    # signal's enum and locale's re; sched_cmd's own modules load no typing.
    "import sched_cmd": frozenset({"enum", "re", "selectors", "signal", "subprocess", "threading"}),
}


def loaded_by(code: str) -> set[str]:
    """The modules *code* adds to a fresh ``python -I`` interpreter."""
    probe = (
        "import sys\n"
        "before = set(sys.modules)\n"
        f"{code}\n"
        "print(' '.join(sorted(set(sys.modules) - before)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    return set(done.stdout.splitlines()[-1].split())


_CASES = list(MAY_LOAD)


@pytest.mark.parametrize("code", _CASES)
def test_an_import_loads_only_the_costly_modules_it_names(code: str) -> None:
    """The costly modules *code* loads are among the ones it names."""
    assert set() == (loaded_by(code) & COSTLY) - MAY_LOAD[code]


def test_the_check_sees_a_costly_import() -> None:
    """The probe itself reports what an import loads (so an empty answer means something)."""
    assert {"typing", "re"} <= loaded_by("import typing") & COSTLY
