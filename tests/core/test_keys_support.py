"""Keys where a database cannot enforce them: refused, never ignored."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.db import NotSupportedError, connection

from scylla_django import checks
from scylla_django.exceptions import DuplicateKey, ScyllaError
from scylla_django.models import Task

pytestmark = pytest.mark.django_db


def test_duplicate_key_is_a_scylla_error():
    assert issubclass(DuplicateKey, ScyllaError)


@pytest.mark.parametrize("real", [True, False], ids=["this database", "one without"])
def test_a_database_without_partial_indexes_refuses_keys_and_writes_nothing(monkeypatch, real):
    if real and connection.features.supports_partial_indexes:
        pytest.skip("this database has partial indexes")
    monkeypatch.setattr(connection.features, "supports_partial_indexes", False)
    with pytest.raises(NotSupportedError, match="partial unique indexes"):
        Task.objects.submit("default", {}, unique_key="k")
    assert not Task.objects.exists()
    assert Task.objects.submit("default", {}).submit_outcome == "inserted"


def test_a_mysql_database_is_warned_about(monkeypatch):
    databases = {"maria": {"ENGINE": "django.db.backends.mysql", "NAME": "x"}}
    monkeypatch.setattr(checks, "settings", SimpleNamespace(DATABASES=databases))
    (warning,) = [m for m in checks.check_unique_keys() if m.id == "scylla_django.W003"]
    assert "'maria'" in warning.msg


def test_a_database_without_key_triggers_refuses_locks_and_writes_nothing():
    from scylla_django import db

    if db.keys.takes_keys(connection):
        pytest.skip("this database takes keys")
    with pytest.raises(NotSupportedError, match="key triggers"):
        Task.objects.submit("default", {}, locks=["invoice:7"])
    assert not Task.objects.exists()
