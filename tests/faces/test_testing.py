"""`scylla_django.testing` (run_task, drain) and the eager mode, as a project's tests use them."""

from __future__ import annotations

import pytest
from django.test import override_settings

from scylla_django.enums import Status
from scylla_django.exceptions import InvalidTransition, TaskNotFound
from scylla_django.models import Task
from scylla_django.retries import Retry
from scylla_django.testing import drain, run_task
from tests import worker_handlers  # noqa: F401  (registers the t-* handlers)

pytestmark = pytest.mark.django_db(transaction=True)


def test_run_task_runs_one_task_and_returns_it_finished():
    task = Task.objects.submit("t-echo", {"x": 1})
    done = run_task(task.rn)
    assert (done.status, done.result) == (Status.COMPLETED, {"echo": {"x": 1}})
    failed = run_task(Task.objects.submit("t-fail", {}).rn)
    assert failed.status == Status.ABORTED and failed.errors[0]["code"] == "exception"
    with pytest.raises(TaskNotFound):
        run_task("nope")
    with pytest.raises(InvalidTransition):
        run_task(task.rn)


def test_drain_runs_what_handlers_submit_and_follow_ups():
    first = Task.objects.submit("t-chain", {"n": 3})
    after = Task.objects.submit("t-echo", {"then": True}, after=[first.rn])
    other = Task.objects.submit("t-sleep", {"seconds": 0.05})
    ran = drain(["t-chain", "t-echo"])
    assert sorted(t.queue for t in ran) == ["t-chain"] * 4 + ["t-echo"]
    assert ran[0].pk == first.pk  # and the follow-up once it had completed
    assert all(t.status == Status.COMPLETED for t in ran)
    assert Task.objects.get(pk=after.pk).status == Status.COMPLETED
    assert Task.objects.get(pk=other.pk).status == Status.READY  # not a drained queue
    assert drain(["t-chain", "t-echo"]) == []


def test_drain_stops_after_max_tasks():
    Task.objects.submit("t-chain", {"n": 10})
    with pytest.raises(RuntimeError, match="ran 3 tasks"):
        drain(["t-chain"], max_tasks=3)


def test_drain_leaves_a_retry_whose_backoff_is_ahead():
    task = Task.objects.submit("t-fail", {}, retry=Retry(max_attempts=2))
    [ran] = drain(["t-fail"])
    assert ran.pk == task.pk and ran.status == Status.ABORTED
    assert Task.objects.filter(retry_of=task.rn, status=Status.READY).count() == 1


def test_eager_mode_runs_handlers_when_the_submission_commits():
    with override_settings(SCYLLA={"EAGER": True}):
        task = Task.objects.submit("t-echo", {"now": True})
        task.refresh_from_db()
        assert task.status == Status.COMPLETED
        chained = Task.objects.submit("t-chain", {"n": 2})
        assert Task.objects.get(pk=chained.pk).status == Status.COMPLETED
        assert Task.objects.filter(queue="t-chain", status=Status.COMPLETED).count() == 3
        orphan = Task.objects.submit("no-such-handler", {})
        assert Task.objects.get(pk=orphan.pk).status == Status.READY
    off = Task.objects.submit("t-echo", {"now": False})
    assert Task.objects.get(pk=off.pk).status == Status.READY
