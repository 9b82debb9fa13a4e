from __future__ import annotations

import os

import pytest
from django.db import connection

from scylla_django.models import Worker


def pytest_collection_modifyitems(config, items):
    """`@pytest.mark.postgres` tests run only when DATABASE_URL points at PostgreSQL;
    `@pytest.mark.failover` tests only when asked for (`-m failover` or
    SCYLLA_TEST_FAILOVER=1: they build a Patroni cluster, see docs/deployment.md)."""
    from django.conf import settings

    if "failover" not in (config.getoption("-m") or "") and not os.environ.get(
        "SCYLLA_TEST_FAILOVER"
    ):
        opt_in = pytest.mark.skip(reason="opt-in: -m failover or SCYLLA_TEST_FAILOVER=1")
        for item in items:
            if "failover" in item.keywords:
                item.add_marker(opt_in)

    engine = settings.DATABASES["default"]["ENGINE"]
    if "mysql" in engine:
        partial = pytest.mark.skip(
            reason="keys need partial unique indexes and key triggers (not MySQL)"
        )
        for item in items:
            if "keys" in item.keywords:
                item.add_marker(partial)
    if "postgresql" in engine:
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (set DATABASE_URL=postgres://...)")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def no_leftover_processes():
    """After each test, stop what a failing process test left running (tests/processes.py)."""
    yield
    from tests.processes import stop_leftovers

    stop_leftovers()


@pytest.fixture
def worker(db) -> Worker:
    return Worker.objects.register(queues=["default"], capacity=4, hostname="test", pid=1)


@pytest.fixture
def other_worker(db) -> Worker:
    return Worker.objects.register(queues=["default"], capacity=4, hostname="test", pid=2)


@pytest.fixture
def vendor(db) -> str:
    return connection.vendor
