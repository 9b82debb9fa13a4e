"""An operator's control of one task that has not started: pause it (no lease takes it, by any
path, until it is resumed), resume it, delete it (kept as a record with its History)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from scylla_django import pytest_plugin
from scylla_django.enums import EventType, Status
from scylla_django.exceptions import (
    InvalidTransition,
    NotPaused,
    TaskNotFound,
    TaskPaused,
    TaskStarted,
)
from scylla_django.models import PAUSED, Batch, Dependency, Task, TaskDeletion, TaskPause, Worker
from tests.helpers import expire, reload

pytestmark = pytest.mark.django_db

MINUTE = timedelta(seconds=60)
scylla_clock = pytest_plugin.scylla_clock


def lease(worker, limit: int = 10) -> list[Task]:
    return Task.objects.lease(worker, ["default"], limit=limit, lease_length=MINUTE)


def test_a_paused_task_is_never_leased_until_released(worker):
    paused = Task.objects.submit("default", {"n": 1}, priority=9)
    other = Task.objects.submit("default", {"n": 2})
    paused.pause(by="alice")
    assert paused.status == Status.READY and paused.is_paused
    assert [t.rn for t in lease(worker)] == [other.rn]
    assert lease(worker) == []
    with pytest.raises(TaskPaused):
        Task.objects.lease_rn(worker, paused.rn)
    paused.resume()
    assert not paused.is_paused and paused.not_before is None
    assert [t.rn for t in lease(worker)] == [paused.rn]
    assert not TaskPause.objects.exists()


@pytest.mark.skipif(
    connection.vendor == "mysql", reason="the virtual clock runs on PostgreSQL and SQLite"
)
def test_the_hold_keeps_the_task_s_own_not_before_and_gives_it_back(scylla_clock):
    worker = Worker.objects.register(queues=["default"], capacity=4)
    task = Task.objects.submit("default", {}, not_before=scylla_clock.now() + timedelta(minutes=5))
    own = task.not_before
    task.pause()
    assert task.not_before == PAUSED
    scylla_clock.advance(timedelta(minutes=10))
    assert lease(worker) == []  # due long ago, but paused
    task.resume()
    assert task.not_before == own
    assert [t.rn for t in lease(worker)] == [task.rn]


def test_paused_is_a_reason_it_waits(worker):
    task = Task.objects.submit("default", {})
    task.pause(by="alice")
    [reason] = [r for r in task.waiting_reasons() if r["code"] == "paused"]
    assert reason["by"] == "alice" and reason["since"]
    assert "paused by alice" in reason["detail"]
    task.resume()
    assert "paused" not in [r["code"] for r in task.waiting_reasons()]


def test_only_a_ready_task_not_paused_and_not_waiting_for_parents_can_be_paused(worker):
    task = Task.objects.submit("default", {})
    task.pause()
    with pytest.raises(TaskPaused):
        task.pause()
    parent = Task.objects.submit("default", {})
    follow_up = Task.objects.submit("default", {}, after=[parent.rn])
    with pytest.raises(InvalidTransition, match="parents"):
        follow_up.pause()
    [running] = lease(worker)
    with pytest.raises(InvalidTransition, match="only a ready task"):
        running.pause()
    assert TaskPause.objects.count() == 1


def test_releasing_a_task_not_paused_is_refused_and_a_cancelled_one_loses_its_pause(worker):
    task = Task.objects.submit("default", {})
    with pytest.raises(NotPaused):
        task.resume()
    task.pause()
    task.cancel()
    assert reload(task).status == Status.CANCELLED
    with pytest.raises(NotPaused, match="cancelled"):
        task.resume()
    assert reload(task).status == Status.CANCELLED
    assert not TaskPause.objects.exists()


def test_a_paused_task_purged_takes_its_hold_along(worker):
    task = Task.objects.submit("default", {})
    task.pause()
    task.cancel()
    Task.objects.filter(pk=task.pk).delete()
    assert not TaskPause.objects.exists()


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


def test_deleting_a_paused_follow_up_or_a_missing_task(worker):
    parent = Task.objects.submit("default", {})
    follow_up = Task.objects.submit("default", {}, after=[parent.rn])
    follow_up.delete_ready()
    assert not Dependency.objects.exists()
    paused = Task.objects.submit("default", {})
    paused.pause()
    paused.delete_ready()
    assert not TaskPause.objects.exists()
    with pytest.raises(TaskNotFound):
        paused.delete_ready()
    with pytest.raises(TaskNotFound):
        paused.pause()


@pytest.mark.skipif(connection.vendor == "mysql", reason="keys are refused on MySQL/MariaDB")
def test_a_task_of_an_order_key_is_kept(worker):
    keyed = Task.objects.submit("default", {}, order_key="account-1")
    with pytest.raises(InvalidTransition, match="order key account-1"):
        keyed.delete_ready()
    assert Task.objects.filter(pk=keyed.pk).exists()
