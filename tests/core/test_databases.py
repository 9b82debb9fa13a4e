"""The routers and their settings (`READ_DATABASE`, `QUEUE_DATABASES`): what they choose, and
the system checks that catch them misconfigured. Real replicas and two databases:
tests/faults/test_replica_reads.py and tests/faults/test_queue_databases.py."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured

from scylla_django.checks import check_routers, check_settings
from scylla_django.conf import scylla_settings
from scylla_django.models import History, Task
from scylla_django.routers import (
    QueueRouter,
    ReadRouter,
    databases,
    reading,
    reading_from,
    request_database,
    working_on,
)

# The aliases are only names here: nothing connects to them.
pytestmark = pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")

ROUTERS = ["scylla_django.routers.ReadRouter", "scylla_django.routers.QueueRouter"]


@pytest.fixture
def two_aliases(settings):
    settings.DATABASES = {**settings.DATABASES, "replica": {}, "second": {}}
    return settings


def test_read_database_must_name_an_alias(two_aliases):
    two_aliases.SCYLLA = {"READ_DATABASE": "replica"}
    assert scylla_settings.READ_DATABASE == "replica"
    two_aliases.SCYLLA = {"READ_DATABASE": "nowhere"}
    with pytest.raises(ImproperlyConfigured, match=r"alias of settings\.DATABASES"):
        scylla_settings.READ_DATABASE  # noqa: B018
    assert [error.id for error in check_settings()] == ["scylla_django.E001"]


def test_queue_databases_must_map_queues_to_aliases(two_aliases):
    two_aliases.SCYLLA = {"QUEUE_DATABASES": {"far": "second"}}
    assert scylla_settings.QUEUE_DATABASES == {"far": "second"}
    assert databases() == ["default", "second"]
    for bad in (["second"], {"far": "nowhere"}, {"far": 1}):
        two_aliases.SCYLLA = {"QUEUE_DATABASES": bad}
        with pytest.raises(ImproperlyConfigured, match="QUEUE_DATABASES"):
            scylla_settings.QUEUE_DATABASES  # noqa: B018


def test_the_settings_need_their_routers(two_aliases):
    two_aliases.SCYLLA = {"READ_DATABASE": "replica", "QUEUE_DATABASES": {"far": "second"}}
    two_aliases.DATABASE_ROUTERS = []
    assert [error.id for error in check_routers()] == ["scylla_django.E040", "scylla_django.E041"]
    two_aliases.DATABASE_ROUTERS = ROUTERS
    assert check_routers() == []
    two_aliases.DATABASE_ROUTERS = [ReadRouter(), QueueRouter()]  # instances are allowed too
    assert check_routers() == []


def test_reading_routes_only_this_apps_reads(two_aliases):
    two_aliases.SCYLLA = {"READ_DATABASE": "replica"}
    router = ReadRouter()
    user_model = get_user_model()
    assert router.db_for_read(Task) is None and reading_from() is None
    with reading() as alias:
        assert alias == "replica" == reading_from()
        assert router.db_for_read(Task) == "replica" == router.db_for_read(History)
        assert router.db_for_read(user_model) is None  # sessions, users: the primary
        assert router.db_for_write(Task) is None  # writes: never the replica
    with reading("second"):  # a routed database is read from itself
        assert router.db_for_read(Task) == "second"
    with working_on("second"):
        assert router.db_for_read(Task) == "second" == router.db_for_write(Task)
    assert router.db_for_read(Task) is None


def test_a_request_reads_on_get_and_works_on_the_named_database_otherwise(two_aliases):
    two_aliases.SCYLLA = {"READ_DATABASE": "replica"}
    with request_database(None, "GET") as alias:
        assert alias == "replica"
    with request_database(None, "POST"):
        assert reading_from() is None
    with request_database("second", "POST"):
        assert ReadRouter().db_for_write(Task) == "second"


def test_the_queue_router_routes_by_queue_hint_or_instance(two_aliases):
    two_aliases.SCYLLA = {"QUEUE_DATABASES": {"far": "second"}}
    router = QueueRouter()
    assert router.db_for_write(Task, queue="far") == "second"
    assert router.db_for_read(Task, instance=Task(queue="far")) == "second"
    assert router.db_for_write(Task, queue="near") is None
    assert router.db_for_write(Task) is None
    assert router.db_for_write(get_user_model(), queue="far") is None
