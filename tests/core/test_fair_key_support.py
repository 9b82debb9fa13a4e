"""Where fair shares work: PostgreSQL and SQLite give a task with a fair key its turn (a
trigger); MySQL/MariaDB refuse the fair key, and lease by age as before."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import NotSupportedError

from scylla_django.models import Task
from tests.factories import WorkerFactory

pytestmark = [pytest.mark.django_db]


def test_a_fair_key_is_taken_where_the_turn_trigger_is_and_refused_elsewhere(vendor):
    if vendor == "mysql":
        with pytest.raises(NotSupportedError):
            Task.objects.submit("default", 1, fair_key="a")
        assert not Task.objects.exists()
    else:
        Task.objects.submit("default", 1, fair_key="a")
        assert Task.objects.get().fair_key == "a"


def test_a_queue_without_fair_keys_leases_by_age_on_every_database():
    worker = WorkerFactory()
    tasks = [Task.objects.submit("default", n).pk for n in range(3)]
    leased = [
        t.pk
        for _ in range(3)
        for t in Task.objects.lease(
            worker, ["default"], limit=1, lease_length=timedelta(seconds=30)
        )
    ]
    assert leased == tasks
