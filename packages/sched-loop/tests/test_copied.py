"""The contracts of the copied modules (testing/sched_testing.py), on this package's copies."""

from sched_testing import copied_contracts

globals().update(copied_contracts("sched_loop"))
