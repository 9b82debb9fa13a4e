from __future__ import annotations

import os
import threading
import time

import pytest
from django.db import connection

from scylla_django.models import Worker
from tests import flush

flush.install()


def pytest_collection_modifyitems(config, items):
    """`@pytest.mark.postgres` tests run only when DATABASE_URL points at PostgreSQL;
    `@pytest.mark.failover` tests only when asked for (`-m failover` or
    SCYLLA_TEST_FAILOVER=1: they build a Patroni cluster, see docs/howto/deployment.md)."""
    from django.conf import settings

    if os.environ.get("SCYLLA_TEST_SKIP_NEUTRAL"):
        # scripts/test runs the tests that touch no database in one cell of the matrix only.
        neutral = [item for item in items if not _touches_database(item)]
        if neutral:
            config.hook.pytest_deselected(items=neutral)
            items[:] = [item for item in items if _touches_database(item)]

    if "failover" not in (config.getoption("-m") or "") and not os.environ.get(
        "SCYLLA_TEST_FAILOVER"
    ):
        opt_in = pytest.mark.skip(reason="opt-in: -m failover or SCYLLA_TEST_FAILOVER=1")
        for item in items:
            if "failover" in item.keywords:
                item.add_marker(opt_in)

    # The modules of the longest tests first (a Patroni cluster, database outages), whole (their
    # module fixtures are set up once): pytest-xdist hands tests out in this order, so that
    # they start while the short ones fill the other workers, not at the end of a run with
    # the other workers idle beside them.
    rank: dict[object, int] = {}
    for item in items:
        rank[item.path] = min(rank.get(item.path, 2), _length_rank(item))
    items.sort(key=lambda item: rank[item.path])

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


def _length_rank(item: pytest.Item) -> int:
    """0 for the tests that take a minute (`failover`), 1 for those of tens of seconds
    (`slow`), 2 for the others."""
    if item.get_closest_marker("failover") is not None:
        return 0
    if item.get_closest_marker("slow") is not None:
        return 1
    return 2


#: The fixtures that give a test the database (pytest-django's, and those that imply them).
DATABASE_FIXTURES = {
    "db",
    "transactional_db",
    "django_db_reset_sequences",
    "django_db_serialized_rollback",
    "live_server",
    "client",
    "admin_client",
    "django_user_model",
}


def _touches_database(item: pytest.Item) -> bool:
    """Whether a test uses the database: a `django_db` mark or a fixture that gives it one.
    pytest-django refuses every query to the others, so they do the same on every database."""
    if item.get_closest_marker("django_db") is not None:
        return True
    return bool(DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())))


@pytest.fixture(autouse=True)
def no_leftover_processes():
    """After each test, stop what a failing process test left running (tests/processes.py)."""
    yield
    from tests.processes import stop_leftovers

    stop_leftovers()


#: How long a thread a test started may take to end after the test (a worker's last pass, a
#: listener's reconnect backoff) before the test is said to have leaked it.
THREAD_GRACE = 15.0


def _ours(thread: threading.Thread) -> bool:
    """Whether `thread` runs the project's code or a test's (a library's own pool threads, a
    browser driver's, are not the test's to stop). A handler's thread (`scylla-task-N`) is
    not counted: a worker abandons a handler that ignores its stop by design (`abandoned`),
    and the tests of that leave one sleeping."""
    if thread.name.startswith("scylla-task-"):
        return False
    target = getattr(thread, "_target", None)
    module = getattr(target, "__module__", None) or type(thread).__module__ or ""
    owner = getattr(target, "__self__", None)
    if owner is not None:
        module = type(owner).__module__ or module
    return thread.name.startswith("scylla") or module.startswith(("scylla_django", "tests"))


@pytest.fixture(autouse=True)
def no_leaked_threads(request):
    """Fail a test that leaves a thread of its own running: a worker or a monitor an earlier
    test forgot goes on leasing, heartbeating and raising into the tests after it."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + THREAD_GRACE
    leaked = []
    for thread in threading.enumerate():
        if thread in before or not _ours(thread):
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            leaked.append(thread.name)
    if leaked:
        pytest.fail(f"the test left threads running: {', '.join(sorted(leaked))}", pytrace=False)


@pytest.fixture
def worker(db) -> Worker:
    return Worker.objects.register(queues=["default"], capacity=4, hostname="test", pid=1)


@pytest.fixture
def other_worker(db) -> Worker:
    return Worker.objects.register(queues=["default"], capacity=4, hostname="test", pid=2)


@pytest.fixture
def vendor(db) -> str:
    return connection.vendor
