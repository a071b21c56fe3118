"""The ``world`` fixture (a test that takes it runs once per backend) and the servers.

The PostgreSQL tests run against the server ``SCHED_TEST_POSTGRES`` names (a
connection string to a database the tests may write to). Without one, a run
that asks for PostgreSQL starts a throw-away cluster of its own for the
session (PostgreSQL's server programs must be installed: ``initdb``,
``pg_ctl``) and stops it at the end: a run asks when it selects only
PostgreSQL tests (``pytest -k postgres``) or sets
``SCHED_TEST_POSTGRES_REQUIRED=1`` (``nox -s postgres`` under CI). Any other
run skips them; under ``SCHED_TEST_POSTGRES_REQUIRED=1`` a test that cannot
get its server fails instead.

The partition tests make their own cluster inside a network namespace (as
root, with iproute2; they skip otherwise, as on a hosted CI runner), and the
proxy tests start PgBouncer in front of the server.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sched_exclusive_servers import Cluster, PgBouncer, far_cluster, start_bouncer
from sched_exclusive_testkit import (
    POSTGRES_REQUIRED,
    FlockWorld,
    PgWorld,
    World,
    close_postgres_sessions,
)
from sched_testing import Child

#: Whether this run asked for PostgreSQL (set at collection).
_ASKED = POSTGRES_REQUIRED


def _postgres_item(item: pytest.Item) -> bool:
    return "postgres" in item.nodeid.lower()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A run that selected only PostgreSQL tests (``-k postgres``) asks for a server."""
    global _ASKED
    if items and all(_postgres_item(item) for item in items):
        _ASKED = True


def unavailable(reason: str) -> None:
    """Skip, or fail where a server is required."""
    if POSTGRES_REQUIRED:
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The test database's connection string: ``SCHED_TEST_POSTGRES``, or a throw-away
    cluster started for this session when the run asked for PostgreSQL. Child processes
    find it in ``SCHED_TEST_POSTGRES`` too."""
    given = os.environ.get("SCHED_TEST_POSTGRES", "")
    if given:
        yield given
        return
    if not _ASKED:
        pytest.skip(
            "no PostgreSQL server: set SCHED_TEST_POSTGRES, or run the PostgreSQL tests "
            "alone (pytest -k postgres) to start a throw-away cluster"
        )
    try:
        cluster = Cluster()
    except (FileNotFoundError, RuntimeError) as exc:
        unavailable(str(exc))
    os.environ["SCHED_TEST_POSTGRES"] = cluster.dsn
    try:
        yield cluster.dsn
    finally:
        close_postgres_sessions()
        os.environ.pop("SCHED_TEST_POSTGRES", None)
        cluster.stop()


@pytest.fixture(params=["flock", "postgres"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    """The coordination of one backend: a directory, or a fresh name in PostgreSQL."""
    made: World = (
        FlockWorld(str(tmp_path))
        if request.param == "flock"
        else PgWorld(request.getfixturevalue("postgres_server"))
    )
    try:
        yield made
    finally:
        made.close()
        if request.param == "postgres":
            close_postgres_sessions()
            # Sessions the test dropped (an interrupt sweep drops some on purpose) are
            # collected now, in the test that dropped them and under its warning filters:
            # collected in a later test, psycopg's ResourceWarning would fail that one.
            gc.collect()


@pytest.fixture
def postgres_required(postgres_server: str) -> str:
    """The test database's connection string (the test skips, or fails where a
    server is required, without one)."""
    return postgres_server


@pytest.fixture
def pg(postgres_required: str) -> Iterator[PgWorld]:
    """A fresh job name in the test database."""
    world = PgWorld(postgres_required)
    try:
        yield world
    finally:
        world.close()
        close_postgres_sessions()


@pytest.fixture(scope="module")
def far_postgres() -> Iterator[Cluster]:
    """A cluster on the far side of a veth link, in a network namespace of its own:
    ``far_dsn`` reaches it through the link, ``dsn`` (its unix socket) whatever
    happens to the link, and ``namespace.cut()`` partitions the link."""
    if not _ASKED and not os.environ.get("SCHED_TEST_POSTGRES"):
        pytest.skip("PostgreSQL was not asked for (pytest -k postgres)")
    try:
        with far_cluster() as cluster:
            yield cluster
    except PermissionError as exc:  # not root (a hosted CI runner): nothing to cut
        pytest.skip(f"no partitionable server: {exc}")
    except FileNotFoundError as exc:
        unavailable(f"no partitionable server: {exc}")
    finally:
        close_postgres_sessions()


@pytest.fixture(params=["transaction", "statement", "session"])
def pgbouncer(request: pytest.FixtureRequest, postgres_required: str) -> Iterator[PgBouncer]:
    """PgBouncer in each pool mode, in front of the test server."""
    bouncer = start_bouncer(postgres_required, request.param)
    try:
        yield bouncer
    finally:
        close_postgres_sessions()
        bouncer.stop()


@pytest.fixture
def children() -> Iterator[list[Child]]:
    """Child processes a test starts; each is reaped (killed if need be) afterwards."""
    spawned: list[Child] = []
    yield spawned
    for child in spawned:
        child.reap()
