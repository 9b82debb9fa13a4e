"""Dead letters: an abort given up is marked dead, kept by the purge until an operator
requeues it (a new linked task) or discards it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models.functions import Now

from scylla_django import Fixed, Retry
from scylla_django.enums import Status
from scylla_django.exceptions import exception_error
from scylla_django.models import Outcome, Task
from tests.factories import running_task

pytestmark = pytest.mark.django_db


def age(days: int) -> None:
    Task.objects.update(updated=Now() - timedelta(days=days))


def test_an_abort_without_retry_policy_is_dead_and_survives_the_purge(worker):
    task = running_task(worker, rn="doomed", queue="default")
    assert task.abort(worker, [{"code": "broken"}]) is None
    assert task.dead is not None
    assert list(Task.objects.dead().values_list("rn", flat=True)) == ["doomed"]
    age(400)
    assert Task.objects.purge(older_than=timedelta(days=1)) == 0
    assert Task.objects.filter(rn="doomed").exists()


def test_a_retry_chain_is_dead_only_once_its_retries_are_used_up(worker):
    task = Task.objects.submit("default", {}, rn="r", retry=Retry(max_attempts=2, backoff=Fixed(0)))
    [leased] = Task.objects.lease(worker, ["default"])
    retry = leased.abort(worker, [exception_error(ValueError("broken"))])
    assert retry is not None
    task.refresh_from_db()
    assert task.dead is None
    # The last attempt fails through the bulk finish, as a worker ends its leases.
    [leased] = Task.objects.lease(worker, ["default"])
    errors = [exception_error(ValueError("again"))]
    assert Task.objects.finish_many(worker, [Outcome(leased.pk, leased.leases, errors=errors)])
    leased.refresh_from_db()
    assert (leased.status, leased.attempt) == (Status.ABORTED, 2)
    assert leased.dead is not None
    assert Task.objects.dead().count() == 1


def test_an_expired_lease_past_max_leases_is_dead(worker, settings):
    settings.SCYLLA = {"MAX_LEASES": 1}
    task = running_task(worker, rn="lost", queue="default")
    Task.objects.filter(pk=task.pk).update(deadline=Now() - timedelta(seconds=1))
    assert Task.objects.reset_expired() == 1
    task.refresh_from_db()
    assert task.status == Status.ABORTED
    assert task.errors[0]["code"] == "max_leases_exceeded"
    assert task.dead is not None


def test_requeue_makes_a_linked_task_and_the_dead_letter_is_purged_in_time(worker):
    task = running_task(worker, rn="doomed", queue="default")
    task.abort(worker, [{"code": "broken"}])
    retry = task.retry()
    assert (retry.retry_of, retry.root, retry.status) == ("doomed", "doomed", Status.READY)
    task.refresh_from_db()
    assert task.dead is None
    assert not Task.objects.dead().exists()
    age(400)
    assert Task.objects.purge(older_than=timedelta(days=1)) == 1
    assert not Task.objects.filter(rn="doomed").exists()


def test_discard_lets_a_dead_letter_go_and_touches_nothing_else(worker):
    task = running_task(worker, rn="doomed", queue="default")
    task.abort(worker, [{"code": "broken"}])
    other = running_task(worker, rn="fine", queue="default")
    other.complete(worker)
    assert Task.objects.all().discard() == 1
    assert Task.objects.all().discard() == 0
    task.refresh_from_db()
    assert (task.status, task.dead) == (Status.ABORTED, None)
    age(400)
    assert Task.objects.purge(older_than=timedelta(days=1)) == 2


def test_a_cancelled_task_is_no_dead_letter(worker):
    task = running_task(worker, rn="stopped", queue="default")
    task.cancel()
    assert not Task.objects.dead().exists()
