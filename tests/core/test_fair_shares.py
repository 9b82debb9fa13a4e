"""Fair shares: a queue shares its capacity across the values of a key (`fair_key`), the lease
taking their tasks in turn (weighted) within a priority instead of the oldest first; the turn
is given by the task table's trigger at insert, whatever the way the task is inserted."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db.models import F

from scylla_django import Fixed, Retry
from scylla_django.exceptions import exception_error
from scylla_django.models import QueueSetting, Task
from scylla_django.monitor import PriorityAging
from tests.factories import WorkerFactory

pytestmark = [pytest.mark.django_db, pytest.mark.keys]


def lease(worker, limit: int = 10, queue: str = "default") -> list[Task]:
    return Task.objects.lease(worker, [queue], limit=limit, lease_length=timedelta(seconds=30))


def drain(worker, limit: int = 5, queue: str = "default") -> list[Task]:
    """Every task of `queue`, leased `limit` at a time and completed, in lease order."""
    order: list[Task] = []
    while leased := lease(worker, limit, queue):
        order += leased
        Task.objects.filter(pk__in=[t.pk for t in leased]).update(status="completed")
    return order


def test_a_late_tenants_tasks_interleave_with_an_early_tenants_backlog():
    QueueSetting.objects.share("default", "tenant")
    worker = WorkerFactory()
    Task.objects.submit_many({"queue": "default", "spec": n, "fair_key": "big"} for n in range(200))
    first = lease(worker, limit=20)
    assert {t.fair_key for t in first} == {"big"}
    for n in range(10):
        Task.objects.submit("default", n, fair_key=("tenant", "small"))
    order = [t.fair_key for t in drain(worker)]
    last_small = max(i for i, key in enumerate(order) if key == "small")
    # One turn each: the small tenant's 10 tasks start within the big one's next 10.
    assert order[: last_small + 1].count("big") <= 10
    assert order.count("small") == 10


def test_without_a_fair_key_a_queue_stays_oldest_first():
    worker = WorkerFactory()
    old = [Task.objects.submit("default", n) for n in range(5)]
    late = Task.objects.submit("default", 9)
    assert [t.pk for t in drain(worker, 2)] == [t.pk for t in [*old, late]]


def test_weights_share_starts_three_to_one():
    QueueSetting.objects.share("default", "tenant", weights={"gold": 3})
    worker = WorkerFactory()
    Task.objects.submit_many({"queue": "default", "spec": n, "fair_key": "gold"} for n in range(90))
    Task.objects.submit_many({"queue": "default", "spec": n, "fair_key": "lead"} for n in range(90))
    window = Counter(t.fair_key for t in lease(worker, limit=40))
    assert window == {"gold": 30, "lead": 10}


def test_priority_comes_before_the_turn():
    QueueSetting.objects.share("default", "tenant")
    worker = WorkerFactory()
    Task.objects.submit_many({"queue": "default", "spec": n, "fair_key": "a"} for n in range(5))
    urgent = Task.objects.submit("default", 1, fair_key="a", priority=9)
    assert lease(worker, limit=1)[0].pk == urgent.pk


def test_a_key_family_member_named_in_limits_gives_the_fair_key(settings):
    settings.SCYLLA = {"LIMITS": {"tenant": {"default": 5}}}
    QueueSetting.objects.share("default", "tenant")
    task = Task.objects.submit("default", 1, limits=[("tenant", 42)])
    assert task.fair_key == "42"
    # Another queue does not share by tenant: no fair key.
    other = Task.objects.submit("other", 1, limits=[("tenant", 42)])
    assert other.fair_key is None


def test_a_retry_keeps_its_fair_key_and_goes_after_its_keys_ready_tasks():
    QueueSetting.objects.share("default", "tenant")
    worker = WorkerFactory()
    Task.objects.submit("default", 1, fair_key="a", retry=Retry(backoff=Fixed(0)))
    second = Task.objects.submit("default", 2, fair_key="a")
    [task] = lease(worker, limit=1)
    retry = task.abort(worker, [exception_error(ValueError())])
    retry.refresh_from_db()
    second.refresh_from_db()
    assert (retry.retry_of, retry.fair_key) == (task.rn, "a")
    assert retry.turn == second.turn + 1


def test_bad_fair_settings_and_values_are_refused():
    with pytest.raises(ValidationError) as error:
        QueueSetting.objects.share("default", "tenant", weights={"a": 0})
    assert error.value.code == "invalid_fair_weights"
    with pytest.raises(ValidationError) as error:
        QueueSetting.objects.share("default", None, weights={"a": 2})
    assert error.value.code == "invalid_fair_weights"
    with pytest.raises(ValidationError) as error:
        Task.objects.submit("default", 1, fair_key=1.5)
    assert "fair_key" in error.value.message_dict
    assert not Task.objects.exists()


def test_aging_raises_a_waiting_tasks_priority_until_it_runs_before_newer_higher_ones():
    QueueSetting.objects.age("default", "1m")
    worker = WorkerFactory()
    low = Task.objects.submit("default", "low", priority=0)
    aging = PriorityAging()
    assert aging.run("default") == {"aged": 0}  # it has not waited a minute yet
    for step in range(1, 4):
        Task.objects.filter(pk=low.pk).update(updated=F("updated") - timedelta(minutes=1))
        assert aging.run("default") == {"aged": 1}
        assert Task.objects.get(pk=low.pk).priority == step
    assert aging.run("default") == {"aged": 0}  # raised once per minute waited
    high = Task.objects.submit("default", "high", priority=2)
    assert [t.pk for t in drain(worker, 1)] == [low.pk, high.pk]


def test_aging_leaves_queues_without_it_and_stops_at_the_top():
    QueueSetting.objects.age("default", 60)
    plain = Task.objects.submit("other", 1)
    top = Task.objects.submit("default", 1, priority=255)
    Task.objects.update(updated=F("updated") - timedelta(hours=1))
    assert PriorityAging().run("default") == {"aged": 0}
    assert (Task.objects.get(pk=plain.pk).priority, Task.objects.get(pk=top.pk).priority) == (
        0,
        255,
    )
    with pytest.raises(ValidationError) as error:
        QueueSetting.objects.age("default", "soon")
    assert error.value.code == "invalid_aging"
    QueueSetting.objects.age("default", None)
    assert QueueSetting.objects.of("default").aging is None
