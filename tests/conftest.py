from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models.functions import Now

from scylla_django.models import Task, Worker


def pytest_collection_modifyitems(config, items):
    """`@pytest.mark.postgres` tests run only when DATABASE_URL points at PostgreSQL."""
    from django.conf import settings

    if "postgresql" in settings.DATABASES["default"]["ENGINE"]:
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (set DATABASE_URL=postgres://...)")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def worker(db) -> Worker:
    return Worker.objects.register(queues=["default"], capacity=4, hostname="test", pid=1)


@pytest.fixture
def other_worker(db) -> Worker:
    return Worker.objects.register(queues=["default"], capacity=4, hostname="test", pid=2)


@pytest.fixture
def vendor(db) -> str:
    return connection.vendor


def expire(task: Task, by: timedelta = timedelta(seconds=1)) -> None:
    """Put a running task's deadline in the past (on the database clock), as if the lease had
    run out: its last write goes back too, since only a yield puts a deadline before it."""
    Task.objects.filter(pk=task.pk).update(
        deadline=Now() - by, updated=Now() - by - timedelta(seconds=1)
    )
