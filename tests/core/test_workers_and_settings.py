"""The Worker registry, the settings object and the system checks."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db.models.functions import Now

from scylla_django.checks import check_settings, check_sqlite
from scylla_django.conf import scylla_settings
from scylla_django.exceptions import WorkerNotFound
from scylla_django.models import Worker


@pytest.mark.django_db
def test_worker_names_come_from_the_database_sequence():
    first = Worker.objects.register(queues=["emails"], capacity=4, hostname="h", pid=10)
    second = Worker.objects.register(queues=["emails", "emails", "sms"])
    assert first.name == f"worker-{first.pk}"
    assert second.pk > first.pk
    assert second.queues == ["emails", "sms"]
    assert (first.capacity, second.capacity) == (4, 1)
    # A worker of `async def` handlers holds tens of thousands of tasks: no thread each.
    assert Worker.objects.register(queues=["feeds"], capacity=50_000).capacity == 50_000
    assert Worker.objects.get_by_name(first.name) == first
    assert first.started is not None and first.stopped is None


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["worker-999999", "worker-x", "7", "", "worker-" + "9" * 40])
def test_unknown_worker_names(name):
    with pytest.raises(WorkerNotFound):
        Worker.objects.get_by_name(name)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("queues", "capacity"),
    [([], 1), (["bad queue"], 1), (["q"], 0), (["q"], "2"), (["q"], 1_000_001)],
)
def test_bad_registrations(queues, capacity):
    with pytest.raises(ValidationError):
        Worker.objects.register(queues=queues, capacity=capacity)
    assert not Worker.objects.exists()


@pytest.mark.django_db
def test_touch_stop_and_alive():
    worker = Worker.objects.register(queues=["q"])
    Worker.objects.filter(pk=worker.pk).update(last_seen=Now() - timedelta(minutes=5))
    assert not Worker.objects.alive(timedelta(minutes=1)).exists()
    worker.touch()
    assert list(Worker.objects.alive(timedelta(minutes=1))) == [worker]
    worker.stop()
    assert worker.stopped is not None
    assert not Worker.objects.alive(timedelta(minutes=1)).exists()


def test_settings_defaults(settings):
    settings.SCYLLA = {}
    assert scylla_settings.LEASE_LENGTH == timedelta(seconds=10)
    assert scylla_settings.RETENTION == timedelta(days=10)
    assert scylla_settings.MAX_LEASES is None
    assert scylla_settings.SPEC_SIZE_LIMIT == 1024 * 1024
    assert scylla_settings.DEFAULT_PRIORITY == 0


def test_settings_are_read_live(settings):
    settings.SCYLLA = {"LEASE_LENGTH": 30, "MAX_LEASES": 5}
    assert scylla_settings.LEASE_LENGTH == timedelta(seconds=30)
    assert scylla_settings.MAX_LEASES == 5
    del settings.SCYLLA
    assert scylla_settings.LEASE_LENGTH == timedelta(seconds=10)


@pytest.mark.parametrize(
    "bad",
    [
        {"LEASE_LENGTH": 0},
        {"LEASE_LENGTH": "10 parsecs"},
        {"LEASE_LENGTH": 0.5},
        {"RETENTION": -5},
        {"MAX_LEASES": 0},
        {"DEFAULT_PRIORITY": 256},
        {"SPEC_SIZE_LIMIT": True},
    ],
)
def test_bad_settings_raise_and_are_reported_by_checks(settings, bad):
    settings.SCYLLA = bad
    [name] = bad
    with pytest.raises(ImproperlyConfigured):
        getattr(scylla_settings, name)
    assert [m.id for m in check_settings()] == ["scylla_django.E001"]


def test_unknown_keys_are_warned_about(settings):
    settings.SCYLLA = {"LEASE_LENGTHS": 10}
    assert [m.id for m in check_settings()] == ["scylla_django.W001"]
    settings.SCYLLA = {"LEASE_LENGTH": 10}
    assert check_settings() == []


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_sqlite_without_immediate_transactions_is_warned_about(settings):
    settings.DATABASES = {
        **settings.DATABASES,
        "extra": {"ENGINE": "django.db.backends.sqlite3", "NAME": "x.sqlite3"},
    }
    warnings = {m.msg: m for m in check_sqlite()}
    [warning] = [m for msg, m in warnings.items() if "'extra'" in msg]
    assert warning.id == "scylla_django.W002" and "IMMEDIATE" in warning.hint
    assert not [msg for msg in warnings if "'default'" in msg]  # the test settings are right


def test_a_renamed_key_is_warned_about_with_its_new_name(settings):
    settings.SCYLLA = {"PURGE_BATCH_SIZE": 10}
    [message] = check_settings()
    assert message.id == "scylla_django.W001"
    assert "PURGE_CHUNK_SIZE" in message.hint
