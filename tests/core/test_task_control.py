"""An operator's control of one task that has not started: hold it (no lease takes it, by any
path, until it is released), release it, delete it (kept as a record with its History)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from scylla_django import pytest_plugin
from scylla_django.enums import EventType, Status
from scylla_django.exceptions import (
    InvalidTransition,
    NotHeld,
    TaskHeld,
    TaskNotFound,
    TaskStarted,
)
from scylla_django.models import ON_HOLD, Batch, Dependency, Task, TaskDeletion, TaskHold, Worker
from tests.helpers import expire, reload

pytestmark = pytest.mark.django_db

MINUTE = timedelta(seconds=60)
scylla_clock = pytest_plugin.scylla_clock


def lease(worker, limit: int = 10) -> list[Task]:
    return Task.objects.lease(worker, ["default"], limit=limit, lease_length=MINUTE)


def test_a_held_task_is_never_leased_until_released(worker):
    held = Task.objects.submit("default", {"n": 1}, priority=9)
    other = Task.objects.submit("default", {"n": 2})
    held.hold(by="alice")
    assert held.status == Status.READY and held.is_held
    assert [t.rn for t in lease(worker)] == [other.rn]
    assert lease(worker) == []
    with pytest.raises(TaskHeld):
        Task.objects.lease_rn(worker, held.rn)
    held.release_hold()
    assert not held.is_held and held.not_before is None
    assert [t.rn for t in lease(worker)] == [held.rn]
    assert not TaskHold.objects.exists()


@pytest.mark.skipif(
    connection.vendor == "mysql", reason="the virtual clock runs on PostgreSQL and SQLite"
)
def test_the_hold_keeps_the_task_s_own_not_before_and_gives_it_back(scylla_clock):
    worker = Worker.objects.register(queues=["default"], capacity=4)
    task = Task.objects.submit("default", {}, not_before=scylla_clock.now() + timedelta(minutes=5))
    own = task.not_before
    task.hold()
    assert task.not_before == ON_HOLD
    scylla_clock.advance(timedelta(minutes=10))
    assert lease(worker) == []  # due long ago, but held
    task.release_hold()
    assert task.not_before == own
    assert [t.rn for t in lease(worker)] == [task.rn]


def test_held_is_a_reason_it_waits(worker):
    task = Task.objects.submit("default", {})
    task.hold(by="alice")
    [reason] = [r for r in task.waiting_reasons() if r["code"] == "held"]
    assert reason["by"] == "alice" and reason["since"]
    assert "held by alice" in reason["detail"]
    task.release_hold()
    assert "held" not in [r["code"] for r in task.waiting_reasons()]


def test_only_a_ready_task_not_held_and_not_waiting_for_parents_can_be_held(worker):
    task = Task.objects.submit("default", {})
    task.hold()
    with pytest.raises(TaskHeld):
        task.hold()
    parent = Task.objects.submit("default", {})
    follow_up = Task.objects.submit("default", {}, after=[parent.rn])
    with pytest.raises(InvalidTransition, match="parents"):
        follow_up.hold()
    [running] = lease(worker)
    with pytest.raises(InvalidTransition, match="only a ready task"):
        running.hold()
    assert TaskHold.objects.count() == 1


def test_releasing_a_task_not_held_is_refused_and_a_cancelled_one_loses_its_hold(worker):
    task = Task.objects.submit("default", {})
    with pytest.raises(NotHeld):
        task.release_hold()
    task.hold()
    task.cancel()
    assert reload(task).status == Status.CANCELLED
    with pytest.raises(NotHeld, match="cancelled"):
        task.release_hold()
    assert reload(task).status == Status.CANCELLED
    assert not TaskHold.objects.exists()


def test_a_held_task_purged_takes_its_hold_along(worker):
    task = Task.objects.submit("default", {})
    task.hold()
    task.cancel()
    Task.objects.filter(pk=task.pk).delete()
    assert not TaskHold.objects.exists()


def test_delete_a_ready_task_keeps_a_record_with_its_history(worker):
    task = Task.objects.submit("default", {"n": 7}, priority=3)
    [leased] = lease(worker)
    expire(leased)
    assert Task.objects.reset_expired() == 1  # it ran once, and is ready again
    record = reload(task).delete_ready(by="alice")
    assert not Task.objects.filter(rn=task.rn).exists()
    assert (record.rn, record.queue, record.spec, record.priority, record.by) == (
        task.rn,
        "default",
        {"n": 7},
        3,
        "alice",
    )
    assert [e["_typ"] for e in record.history] == [
        EventType.ASSIGNMENT,
        EventType.TIMEOUT,
        "TaskDeletion",
    ]
    assert TaskDeletion.objects.get(rn=task.rn).history == record.history
    again = Task.objects.submit("default", {}, rn=task.rn)  # the rn is free again
    assert again.status == Status.READY


def test_a_started_task_cannot_be_deleted(worker):
    task = Task.objects.submit("default", {})
    [running] = lease(worker)
    with pytest.raises(TaskStarted):
        running.delete_ready()
    running.complete(worker)
    with pytest.raises(TaskStarted):
        reload(task).delete_ready()
    cancelled = Task.objects.submit("default", {})
    cancelled.cancel()
    with pytest.raises(InvalidTransition, match="only a ready task"):
        reload(cancelled).delete_ready()
    batch = Batch.objects.create(total=1)
    member = Task.objects.submit("default", {})
    Task.objects.filter(pk=member.pk).update(batch=batch)
    with pytest.raises(InvalidTransition, match="a batch"):
        reload(member).delete_ready()
    assert Task.objects.count() == 3 and not TaskDeletion.objects.exists()


def test_deleting_a_held_follow_up_or_a_missing_task(worker):
    parent = Task.objects.submit("default", {})
    follow_up = Task.objects.submit("default", {}, after=[parent.rn])
    follow_up.delete_ready()
    assert not Dependency.objects.exists()
    held = Task.objects.submit("default", {})
    held.hold()
    held.delete_ready()
    assert not TaskHold.objects.exists()
    with pytest.raises(TaskNotFound):
        held.delete_ready()
    with pytest.raises(TaskNotFound):
        held.hold()


@pytest.mark.skipif(connection.vendor == "mysql", reason="keys are refused on MySQL/MariaDB")
def test_a_task_of_an_order_key_is_kept(worker):
    keyed = Task.objects.submit("default", {}, order_key="account-1")
    with pytest.raises(InvalidTransition, match="order key account-1"):
        keyed.delete_ready()
    assert Task.objects.filter(pk=keyed.pk).exists()
