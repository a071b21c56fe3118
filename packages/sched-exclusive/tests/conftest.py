"""The ``world`` fixture: a test that takes it runs once per backend.

The PostgreSQL run needs ``SCHED_TEST_POSTGRES`` (a connection string to a
database the tests may write to; ``nox -s postgres`` starts a throw-away
cluster and sets it). Without it that run is skipped, unless
``SCHED_TEST_POSTGRES_REQUIRED=1`` (the nox session, CI) makes it an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sched_exclusive_testkit import (
    POSTGRES_DSN,
    POSTGRES_REQUIRED,
    FlockWorld,
    PgWorld,
    World,
    close_postgres_sessions,
)
from sched_testing import Child


def postgres_dsn() -> str:
    """The test database's connection string; skips (or fails, where required) without one."""
    if not POSTGRES_DSN:
        if POSTGRES_REQUIRED:
            pytest.fail("SCHED_TEST_POSTGRES is not set, and a PostgreSQL server is required")
        pytest.skip("no PostgreSQL server: set SCHED_TEST_POSTGRES (nox -s postgres does)")
    return POSTGRES_DSN


@pytest.fixture(params=["flock", "postgres"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    """The coordination of one backend: a directory, or a fresh name in PostgreSQL."""
    made: World = FlockWorld(str(tmp_path)) if request.param == "flock" else PgWorld(postgres_dsn())
    try:
        yield made
    finally:
        made.close()
        if request.param == "postgres":
            close_postgres_sessions()


@pytest.fixture
def postgres_required() -> str:
    """Skip (or fail, where required) a test that needs PostgreSQL when none is given."""
    return postgres_dsn()


@pytest.fixture
def children() -> Iterator[list[Child]]:
    """Child processes a test starts; each is reaped (killed if need be) afterwards."""
    spawned: list[Child] = []
    yield spawned
    for child in spawned:
        child.reap()
