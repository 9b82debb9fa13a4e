"""Task lifecycles in the worker: a handler snoozes (`raise Snooze`, `ctx.snooze`), spawns
children (`ctx.spawn`) and reads its parents' results (`ctx.parent_results`)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db.models.functions import Now

from scylla_django.batches import release_callbacks
from scylla_django.enums import EventType, Status
from scylla_django.handlers import TaskContext
from scylla_django.models import AFTER_PARENTS, Batch, History, Task
from scylla_django.worker import TaskWorker, WorkerOptions
from tests import worker_handlers  # noqa: F401  (registers the t-* handlers)
from tests.factories import running_task

pytestmark = pytest.mark.django_db(transaction=True)


def run_once(queue: str) -> None:
    TaskWorker(WorkerOptions([queue], poll_interval=0.05)).run(once=True)


@pytest.mark.parametrize("raised", [True, False], ids=["raise Snooze", "ctx.snooze"])
def test_a_handler_snoozes_its_task_and_runs_again_later(raised):
    task = Task.objects.submit("t-snooze", {"times": 2, "delay": 60, "raise": raised})
    for snoozes in (1, 2):
        run_once("t-snooze")
        stored = Task.objects.get(pk=task.pk)
        assert (stored.status, stored.snoozes, stored.leases) == (Status.READY, snoozes, snoozes)
        assert stored.attempt == 1 and stored.errors == []
        run_once("t-snooze")  # not due yet: nothing leased
        assert Task.objects.get(pk=task.pk).leases == snoozes
        Task.objects.filter(pk=task.pk).update(not_before=Now())
    run_once("t-snooze")
    stored = Task.objects.get(pk=task.pk)
    assert (stored.status, stored.result) == (Status.COMPLETED, {"snoozes": 2})
    assert list(History.objects.filter(task=task).values_list("typ", flat=True)) == [
        EventType.ASSIGNMENT,
        EventType.SNOOZE,
        EventType.ASSIGNMENT,
        EventType.SNOOZE,
        EventType.ASSIGNMENT,
        EventType.COMPLETION,
    ]


def test_a_handler_that_snoozes_too_often_is_aborted(settings):
    settings.SCYLLA = {"MAX_SNOOZES": 1}
    task = Task.objects.submit("t-snooze", {"times": 5, "delay": 0.001})
    run_once("t-snooze")
    Task.objects.filter(pk=task.pk).update(not_before=Now())
    run_once("t-snooze")
    stored = Task.objects.get(pk=task.pk)
    assert (stored.status, stored.snoozes) == (Status.ABORTED, 1)
    assert stored.errors[0]["code"] == "too_many_snoozes"


@pytest.mark.parametrize("raised", [True, False], ids=["raise Snooze", "ctx.snooze"])
def test_a_bad_snooze_delay_aborts_the_task(raised):
    """`Snooze(-1)` fails where it is built, as `ctx.snooze("later")` does where it is
    called: the handler raises the ValidationError, and the task is aborted with it."""
    task = Task.objects.submit(
        "t-snooze", {"times": 1, "delay": -1 if raised else "later", "raise": raised}
    )
    run_once("t-snooze")
    stored = Task.objects.get(pk=task.pk)
    assert stored.status == Status.ABORTED
    [error] = stored.errors
    assert error["code"] == "exception"
    assert error["args"]["type"] == "django.core.exceptions.ValidationError"
    assert "A delay must be a positive duration, not" in error["args"]["message"]


def test_children_are_submitted_when_their_parent_completes():
    parent = Task.objects.submit("t-spawn", {"children": 3})
    run_once("t-spawn")
    parent.refresh_from_db()
    assert parent.status == Status.COMPLETED
    children = Task.objects.filter(parent=parent.rn)
    assert sorted(parent.result["children"]) == sorted(children.values_list("rn", flat=True))
    assert sorted(c.spec["n"] for c in children) == [0, 1, 2]
    assert {c.status for c in children} == {Status.READY}


def test_children_of_an_aborted_parent_are_never_submitted_unless_now():
    parent = Task.objects.submit("t-spawn", {"children": 2, "now": True, "fail": True})
    run_once("t-spawn")
    parent.refresh_from_db()
    assert parent.status == Status.ABORTED
    [child] = Task.objects.filter(parent=parent.rn)
    assert child.spec == {"now": True}


def test_children_of_a_snoozed_run_are_not_submitted_only_those_of_the_completed_one():
    parent = Task.objects.submit("t-spawn", {"children": 2, "snooze": True})
    run_once("t-spawn")
    assert Task.objects.get(pk=parent.pk).status == Status.READY
    assert not Task.objects.filter(parent=parent.rn).exists()
    Task.objects.filter(pk=parent.pk).update(not_before=Now())
    run_once("t-spawn")
    parent.refresh_from_db()
    assert parent.status == Status.COMPLETED
    assert Task.objects.filter(parent=parent.rn).count() == 2


def test_spawn_validates_the_child_in_the_handler(worker):
    task = running_task(worker)
    ctx = TaskContext(task, worker)
    with pytest.raises(ValidationError) as raised:
        ctx.spawn("bad queue name!", 1)
    assert "queue" in raised.value.error_dict
    with pytest.raises(ValidationError):
        ctx.spawn("t-echo", 1, expires_in=-1, now=True)
    assert ctx.children == [] and not Task.objects.filter(parent=task.rn).exists()


def test_a_follow_up_handler_reads_its_parents_results():
    first = Task.objects.submit("t-echo-num", 1)
    second = Task.objects.submit("t-echo-num", 2)
    follow_up = Task.objects.submit("t-sum", {}, after=[first.rn, second.rn])
    for task, result in ((first, 20), (second, 22)):
        Task.objects.filter(pk=task.pk).update(status=Status.COMPLETED, result=result)
    from scylla_django.followups import release_followups

    assert release_followups().released == 1
    run_once("t-sum")
    follow_up.refresh_from_db()
    assert follow_up.status == Status.COMPLETED
    assert follow_up.result == {"sum": 42, "parents": sorted([first.rn, second.rn])}


def test_a_handler_opens_a_batch_written_with_its_completion():
    parent = Task.objects.submit("t-fan-out", {"tasks": 3})
    run_once("t-fan-out")
    parent.refresh_from_db()
    assert parent.status == Status.COMPLETED
    [batch] = Batch.objects.all()  # the batch left by an exception is not written
    tasks = Task.objects.filter(batch=batch)
    assert sorted(tasks.values_list("rn", flat=True)) == sorted(parent.result["tasks"])
    assert {t.parent for t in tasks} == {parent.rn}  # children of the handler's task
    assert (batch.total, batch.completed) == (3, 0)
    callback = Task.objects.get(pk=batch.on_success_id)
    assert callback.parent == parent.rn and callback.not_before == AFTER_PARENTS
    assert not Task.objects.filter(spec__dropped=True).exists()
    for _ in range(3):
        run_once("t-echo")
    batch.refresh_from_db()
    assert batch.completed == 3
    release_callbacks()
    callback.refresh_from_db()
    assert callback.status == Status.READY and callback.not_before is None
    release_callbacks()  # once
    assert Task.objects.filter(spec__callback=True).count() == 1


def test_a_batch_of_a_handler_that_fails_is_never_written():
    parent = Task.objects.submit("t-fan-out", {"tasks": 2, "fail": True})
    run_once("t-fan-out")
    assert Task.objects.get(pk=parent.pk).status == Status.ABORTED
    assert not Batch.objects.exists()
    assert Task.objects.count() == 1


def test_a_bad_batch_callback_or_task_is_the_handlers_error(worker):
    task = running_task(worker)
    ctx = TaskContext(task, worker)
    with pytest.raises(ValidationError) as caught:
        ctx.batch(on_success=("no-such-queue-anywhere", {}))
    assert caught.value.error_dict["on_success"][0].code == "unknown_queue"
    batch = ctx.batch()
    with pytest.raises(ValidationError):
        batch.submit("t-echo", None)
    assert batch.tasks == []
