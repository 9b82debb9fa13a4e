"""Purge: only terminal tasks past their retention go, with their History, in chunks."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db.models.functions import Now

from scylla_django.enums import Status
from scylla_django.models import History, Task
from tests.factories import TaskFactory, running_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def mixed(worker):
    """Two tasks in each status, one set aged 30 days and the other fresh."""
    made = {}
    for age in ("old", "new"):
        for status in sorted(Status, key=lambda s: s == Status.READY):  # ready last
            task = running_task(worker, rn=f"{age}-{status}", queue=f"q-{age}")
            if status == Status.READY:
                task.yield_lease(worker)
                Task.objects.reset_expired()
            elif status == Status.COMPLETED:
                task.complete(worker)
            elif status == Status.ABORTED:
                task.abort(worker, {"code": "x"})
            elif status == Status.CANCELLED:
                task.cancel()
            made[(age, status)] = task
    # The aborts were given up (dead letters, which the purge keeps): let them go.
    assert Task.objects.all().discard() == 2
    Task.objects.filter(rn__startswith="old-").update(updated=Now() - timedelta(days=30))
    return made


def remaining() -> set[str]:
    return set(Task.objects.values_list("rn", flat=True))


def test_purge_deletes_old_terminal_tasks_and_their_history(mixed):
    assert Task.objects.purgeable(timedelta(days=10)).count() == 3
    assert Task.objects.purge(older_than=timedelta(days=10)) == 3
    assert remaining() == {
        "old-ready",
        "old-running",
        *(f"new-{s}" for s in Status),
    }
    assert not History.objects.exclude(task__in=Task.objects.all()).exists()
    assert History.objects.filter(task__rn="old-running").exists()


def test_purge_uses_the_retention_setting(mixed, settings):
    settings.SCYLLA = {"RETENTION": timedelta(days=40)}
    assert Task.objects.purge() == 0
    settings.SCYLLA = {"RETENTION": 20 * 24 * 3600}
    assert Task.objects.purge() == 3


def test_an_age_of_zero_purges_every_terminal_task_even_one_finished_this_instant(mixed):
    """`timedelta(0)` (`scylla_cleanup --older-than 0`) sets no age at all: a task whose
    last write is not before now on the database's clock (a clock of millisecond steps,
    SQLite's, cannot tell one finished this instant from now) goes too."""
    Task.objects.filter(rn__startswith="new-").update(updated=Now() + timedelta(seconds=5))
    assert Task.objects.purgeable(timedelta(0)).count() == 6
    assert Task.objects.purge(timedelta(0)) == 6
    assert remaining() == {"old-ready", "old-running", "new-ready", "new-running"}


def test_purge_by_status_and_queue(mixed):
    assert Task.objects.purge(timedelta(days=1), statuses=["aborted"]) == 1
    assert "old-aborted" not in remaining()
    assert Task.objects.purge(timedelta(days=1), queue="q-new") == 0
    assert Task.objects.purge(timedelta(days=1), queue="q-old") == 2


@pytest.mark.parametrize("statuses", [["ready"], ["running", "completed"], [], ["nonsense"]])
def test_purge_refuses_non_terminal_statuses(mixed, statuses):
    with pytest.raises(ValidationError):
        Task.objects.purge(timedelta(days=1), statuses=statuses)
    assert len(remaining()) == 10


def test_purge_in_small_chunks_deletes_everything_eligible(worker):
    for n in range(23):
        TaskFactory(rn=f"t{n}").cancel()
    TaskFactory(rn="alive")
    Task.objects.update(updated=Now() - timedelta(days=30))
    assert Task.objects.purge(timedelta(days=1), chunk_size=5) == 23
    assert remaining() == {"alive"}
    assert History.objects.count() == 0


def test_deleting_tasks_directly_takes_their_history_too(worker):
    one, two = running_task(worker), running_task(worker)
    one.delete()
    assert not History.objects.filter(task_id=one.pk).exists()
    assert Task.objects.filter(pk=two.pk).delete() == (1, {"scylla_django.Task": 1})
    assert History.objects.count() == 0
