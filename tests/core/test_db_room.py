"""The database room's own helpers: the retry of a failed database call, the clock reader,
JSON list membership on every vendor, and which path a database takes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from scylla_django import db
from scylla_django.models import Task, Worker


def test_a_retry_counts_failures_in_a_row_and_a_success_ends_them():
    waits: list[int] = []
    retry = db.DatabaseRetry(delay=lambda failures: waits.append(failures) or failures / 10)
    assert retry.succeeded() == 0  # nothing had failed
    assert [retry.failed(), retry.failed(), retry.failed()] == [0.1, 0.2, 0.3]
    assert waits == [1, 2, 3]
    assert retry.succeeded() == 3
    assert retry.failures == 0 and retry.failed() == 0.1  # counted afresh


def test_a_retry_waits_the_database_retry_backoff_by_default():
    retry = db.DatabaseRetry()
    assert [retry.failed() for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


@pytest.mark.django_db(transaction=True)
def test_a_failure_drops_the_connection_and_the_next_query_opens_a_new_one():
    Task.objects.count()
    assert connection.connection is not None
    db.DatabaseRetry("default").failed()
    assert connection.connection is None
    assert Task.objects.count() == 0


@pytest.mark.django_db
def test_a_connection_inside_the_caller_s_transaction_is_kept():
    Task.objects.count()
    db.discard_connection("default")  # the test case's transaction is open
    assert connection.connection is not None
    db.ping("default")


@pytest.mark.django_db
def test_the_clock_reader_reads_the_database_s_time():
    before = datetime.now(UTC)
    now = db.read_clock("default")
    after = datetime.now(UTC)
    assert now.tzinfo is not None
    # The database's time between two readings of this host's clock (the server is on this
    # host: one clock; a millisecond for the rounding of the database's time).
    slack = timedelta(milliseconds=1)
    assert before - slack <= now <= after + slack


@pytest.mark.django_db
def test_a_json_list_holds_a_string_or_an_object_with_a_key(worker):
    Worker.objects.register(queues=["mail", "reports"], hostname="test", pid=3)
    assert (
        Worker.objects.filter(db.json_list_contains(Worker, "queues", "mail", "default")).count()
        == 1
    )
    first, second = (Task.objects.submit("q", {"n": n}) for n in range(2))
    Task.objects.filter(pk=first.pk).update(errors=[{"code": "timeout", "args": {}}])
    Task.objects.filter(pk=second.pk).update(errors=[{"code": "other"}, {"code": "boom"}])
    found = Task.objects.filter(db.json_list_contains(Task, "errors", {"code": "boom"}, "default"))
    assert list(found) == [second]
    none = Task.objects.filter(db.json_list_contains(Task, "errors", {"code": "x"}, "default"))
    assert not none.exists()


@pytest.mark.django_db
def test_only_postgresql_listens_and_estimates(vendor):
    driver = db.driver("default")
    assert driver.listens is (vendor == "postgresql")
    assert driver.estimates_rows is (vendor == "postgresql")
    assert driver.finishes_and_leases_at_once is (vendor == "postgresql")
    assert (db.planned_rows(Task.objects.all()) is None) is (vendor != "postgresql")


@pytest.mark.django_db
def test_a_database_s_driver_is_chosen_once(vendor):
    assert db.driver("default") is db.driver("default")
    expected = {"postgresql": "PostgresqlDriver", "sqlite": "SqliteDriver", "mysql": "MysqlDriver"}
    assert type(db.driver("default")).__name__ == expected[vendor]
    assert type(db.driver("default")) is db.driver_class(connection.settings_dict)


@pytest.mark.parametrize(
    ("engine", "driver"),
    [
        ("django.db.backends.postgresql", "PostgresqlDriver"),
        ("django.contrib.gis.db.backends.postgis", "PostgresqlDriver"),
        ("django.db.backends.sqlite3", "SqliteDriver"),
        ("django.db.backends.mysql", "MysqlDriver"),
        ("some.other.backend", "OrmDriver"),
    ],
)
def test_the_checks_read_a_driver_from_settings_without_connecting(engine, driver):
    assert db.driver_class({"ENGINE": engine}).__name__ == driver
    pooled = {"ENGINE": engine, "DISABLE_SERVER_SIDE_CURSORS": True}
    assert db.transaction_pooled(pooled) is (driver == "PostgresqlDriver")
