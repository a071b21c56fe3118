"""Test setup for sched-loop: make the shared test helpers importable.

The suites run in pytest's importlib mode, which puts no test folder on
``sys.path``; the helpers live in a module with a package-unique name
(``sched_loop_testkit``) so that it cannot collide with another package's.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
