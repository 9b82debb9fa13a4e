"""Admission control from Python: caps per queue and per admission key, what a full queue
does (reject, shed_oldest, wait), bulk submissions, and the origin rows."""

from __future__ import annotations

import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import override_settings

from scylla_django.enums import Status
from scylla_django.exceptions import QueueFull
from scylla_django.models import QueueSetting, Submitter, Task, TaskOrigin
from scylla_django.models.admission import SHED, key_cap

pytestmark = pytest.mark.django_db


def test_an_uncapped_queue_takes_everything_and_writes_no_origin():
    for _ in range(5):
        Task.objects.submit("free", {})
    assert Task.objects.filter(queue="free").count() == 5
    assert not TaskOrigin.objects.exists()


def test_a_full_queue_refuses_then_takes_again_once_a_task_left():
    QueueSetting.objects.cap("capped", 2)
    first = Task.objects.submit("capped", {})
    Task.objects.submit("capped", {})
    with pytest.raises(QueueFull) as refused:
        Task.objects.submit("capped", {}, rn="third")
    assert refused.value.scope == "queue capped" and refused.value.max_ready == 2
    assert refused.value.retry_after >= 1
    assert not Task.objects.filter(rn="third").exists()
    first.cancel()  # a ready task leaves: a place is free
    Task.objects.submit("capped", {}, rn="third")
    # Tasks not ready (running, finished, scheduled later ones count: they are ready) do not count.
    assert Task.objects.filter(queue="capped", status=Status.READY).count() == 2


def test_shed_oldest_cancels_the_oldest_ready_task_with_code_shed():
    QueueSetting.objects.cap("capped", 2, on_full="shed_oldest")
    rns = [Task.objects.submit("capped", {}, rn=f"t{i}").rn for i in range(5)]
    ready = set(Task.objects.filter(status=Status.READY).values_list("rn", flat=True))
    assert ready == set(rns[-2:])
    for task in Task.objects.filter(status=Status.CANCELLED):
        assert task.errors[-1]["code"] == SHED
        assert task.errors[-1]["args"] == {"scope": "queue capped", "max_ready": 2}
        assert [h.typ for h in task.history.all()] == ["TaskCancellation"]


def test_a_duplicate_unique_key_sheds_nothing():
    if connection.vendor == "mysql":
        pytest.skip("unique keys need PostgreSQL or SQLite")
    QueueSetting.objects.cap("capped", 1, on_full="shed_oldest")
    held = Task.objects.submit("capped", {}, unique_key="k")
    again = Task.objects.submit("capped", {}, unique_key="k")
    assert again.rn == held.rn and again.submit_outcome == "duplicate"
    held.refresh_from_db()
    assert held.status == Status.READY


def test_wait_gives_up_after_its_timeout():
    QueueSetting.objects.cap("capped", 1)
    Task.objects.submit("capped", {})
    with pytest.raises(QueueFull):
        Task.objects.submit("capped", {}, on_full="wait", wait=0.2)
    assert Task.objects.filter(queue="capped").count() == 1


@pytest.mark.django_db(transaction=True)
def test_wait_goes_in_once_another_connection_frees_a_place():
    """A waiting submission retries until a task leaves: here another thread (its own
    connection) cancels the ready task once the waiter has been refused once."""
    QueueSetting.objects.cap("capped", 1)
    blocker = Task.objects.submit("capped", {})
    refused = threading.Event()
    original = QueueFull.__init__

    def noticing(self, *args, **kwargs):
        original(self, *args, **kwargs)
        refused.set()

    def cancel_when_refused():
        try:
            refused.wait(60)
            Task.objects.get(pk=blocker.pk).cancel()
        finally:
            from django.db import connections

            connections.close_all()

    QueueFull.__init__ = noticing  # type: ignore[method-assign]
    canceller = threading.Thread(target=cancel_when_refused)
    canceller.start()
    try:
        task = Task.objects.submit("capped", {}, on_full="wait", wait=60)
    finally:
        QueueFull.__init__ = original  # type: ignore[method-assign]
        refused.set()
        canceller.join()
    assert task.status == Status.READY
    assert Task.objects.filter(queue="capped", status=Status.READY).get().rn == task.rn


@override_settings(SCYLLA={"MAX_READY": {"tenant": 2, "tenant:big": 3}})
def test_an_admission_key_is_capped_by_its_own_or_its_family_cap():
    if connection.vendor == "mysql":
        pytest.skip("admission keys need PostgreSQL or SQLite")
    assert key_cap("tenant:7") == 2 and key_cap("tenant:big") == 3 and key_cap("other") is None
    for _ in range(2):
        Task.objects.submit("q", {}, admission_key="tenant:7")
    with pytest.raises(QueueFull) as refused:
        Task.objects.submit("q", {}, admission_key="tenant:7")
    assert refused.value.scope == "key tenant:7"
    for _ in range(3):
        Task.objects.submit("q", {}, admission_key="tenant:big")
    with pytest.raises(QueueFull):
        Task.objects.submit("other-queue", {}, admission_key="tenant:big")  # any queue
    Task.objects.submit("q", {}, admission_key="other")  # no cap
    assert TaskOrigin.objects.filter(admission_key="tenant:7").count() == 2
    # shed_oldest works per key too, and sheds the key's oldest, not the queue's.
    Task.objects.submit("q", {}, rn="new", admission_key="tenant:7", on_full="shed_oldest")
    assert Task.objects.filter(origin__admission_key="tenant:7", status=Status.READY).count() == 2
    assert Task.objects.filter(status=Status.CANCELLED).get().origin.admission_key == "tenant:7"


def test_bad_admission_arguments_are_refused_and_write_nothing():
    with pytest.raises(ValidationError):
        Task.objects.submit("q", {}, on_full="drop")
    with pytest.raises(ValidationError):
        Task.objects.submit("q", {}, wait=1)  # only with on_full="wait"
    with pytest.raises(ValidationError):
        Task.objects.submit("q", {}, admission_key="")
    with pytest.raises(ValidationError):
        QueueSetting.objects.cap("q", 0)
    with pytest.raises(ValidationError):
        QueueSetting.objects.cap("q", 5, on_full="wait")  # a caller's choice only
    assert not Task.objects.exists()


def test_submit_many_admits_up_to_the_cap_and_reports_the_rest_full():
    QueueSetting.objects.cap("capped", 3)
    Task.objects.submit("capped", {})
    items = [{"queue": "capped", "spec": {}} for _ in range(4)] + [{"queue": "free", "spec": {}}]
    outcomes = [o.outcome for o in Task.objects.submit_many(items)]
    assert outcomes == ["inserted", "inserted", "full", "full", "inserted"]
    assert Task.objects.filter(queue="capped").count() == 3
    shed = [{"queue": "capped", "spec": {}, "on_full": "shed_oldest"}]
    assert [o.outcome for o in Task.objects.submit_many(shed)] == ["inserted"]
    assert Task.objects.filter(status=Status.CANCELLED).count() == 1
    bad = Task.objects.submit_many([{"queue": "capped", "spec": {}, "on_full": "wait"}])
    assert bad[0].outcome == "invalid" and "on_full" in bad[0].errors


def test_a_submitter_is_recorded_once_beside_the_task(django_user_model):
    user = django_user_model.objects.create_user("ann")
    task = Task.objects.submit("q", {}, submitter=Submitter.of(user, description="import"))
    origin = TaskOrigin.objects.get(task=task)
    assert (origin.kind, origin.user, origin.name, origin.description) == (
        "user",
        user,
        "ann",
        "import",
    )
    assert task.submitted_by() == user.pk
    outcomes = Task.objects.submit_many(
        [{"queue": "q", "spec": {}} for _ in range(3)], submitter=Submitter.of(user)
    )
    rns = [o.rn for o in outcomes]
    assert TaskOrigin.objects.filter(task__rn__in=rns, user=user).count() == 3
    # Purged with their tasks.
    Task.objects.all().delete()
    assert not TaskOrigin.objects.exists()
