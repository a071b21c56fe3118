"""Test settings shared by every package's suite and tests-integration/.

Hypothesis profiles are registered once, here: ``ci`` (the default) has no
deadline, because these machines are shared and timing is not what a property
asserts; ``deep`` runs many more examples. Select it with
``SCHED_HYPOTHESIS_PROFILE=deep``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "deep", deadline=None, max_examples=5_000, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("SCHED_HYPOTHESIS_PROFILE", "ci"))
