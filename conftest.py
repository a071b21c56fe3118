"""Test settings shared by every package's suite and tests-integration/.

Hypothesis profiles are registered once, here: ``ci`` (the default) has no
deadline, because these machines are shared and timing is not what a property
asserts; ``deep`` runs many more examples. Select it with
``SCHED_HYPOTHESIS_PROFILE=deep``.

What every suite shares (child processes, descriptors, socket folders, a Go
toolchain) is ``testing/sched_testing.py``; each package keeps the helpers
only its tests share in a module with a package-unique name beside them
(``sched_cmd_testkit``, ...). pytest's importlib mode puts no test folder on
``sys.path``, so ``testing/`` and every ``tests/`` folder go there once, here:
``packages/*/tests`` in the tree, and ``tests`` where a suite runs from a copy
beside this file (the wheel tests, which get a copy of ``testing/`` too).

A shell without job control starts a background command (``nox &``, a CI
step's ``cmd &``) with SIGINT ignored, and every child inherits that: the
tests that press Ctrl-C on a child would then wait for an exit that never
comes. The suite takes SIGINT's default back, once, here.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "deep", deadline=None, max_examples=5_000, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("SCHED_HYPOTHESIS_PROFILE", "ci"))

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_HERE = Path(__file__).resolve().parent
for _tests in sorted([_HERE / "testing", _HERE / "tests", *_HERE.glob("packages/*/tests")]):
    if _tests.is_dir() and str(_tests) not in sys.path:
        sys.path.append(str(_tests))
