"""`scylla_django.testing` (run_task, drain) and the eager mode, as a project's tests use them."""

from __future__ import annotations

import json
import logging
from pathlib import Path

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


def test_drain_returns_the_children_its_handlers_spawn_and_batch():
    parent = Task.objects.submit("t-spawn", {"children": 2})
    fan_out = Task.objects.submit("t-fan-out", {"tasks": 2})
    ran = drain(["t-spawn", "t-fan-out", "t-echo"])
    assert all(t.status == Status.COMPLETED for t in ran)
    by_rn = {t.rn: t for t in ran}
    assert set(by_rn[parent.rn].result["children"]) < set(by_rn)
    spawned = Task.objects.filter(parent=parent.rn)
    batched = Task.objects.filter(parent=fan_out.rn)
    assert {t.spec["n"] for t in spawned} == {0, 1}
    # The batch's two tasks, then its on_success callback once both completed.
    assert sorted(json.dumps(t.spec) for t in batched) == [
        '{"callback": true}',
        '{"n": 0}',
        '{"n": 1}',
    ]
    assert {t.rn for t in (parent, fan_out, *spawned, *batched)} == set(by_rn)
    assert len(ran) == 7


def test_run_task_runs_a_batch_handler_with_a_batch_of_one_and_drain_by_batches():
    lone = Task.objects.submit("t-bundle", {"n": 1})
    done = run_task(lone.rn)
    assert done.status == Status.COMPLETED and done.result["size"] == 1
    tasks = [Task.objects.submit("t-bundle", {"n": n}) for n in range(7)]
    ran = drain(["t-bundle"])
    assert [t.pk for t in ran] == [t.pk for t in tasks]
    assert all(t.status == Status.COMPLETED for t in ran)
    assert [t.result["size"] for t in ran] == [5] * 5 + [2] * 2


def test_eager_mode_submits_what_handlers_spawn_and_runs_it():
    with override_settings(SCYLLA={"EAGER": True}):
        parent = Task.objects.submit("t-spawn", {"children": 2})
        snoozer = Task.objects.submit("t-snooze", {"times": 1, "delay": 300})
    assert Task.objects.get(pk=parent.pk).status == Status.COMPLETED
    children = Task.objects.filter(parent=parent.rn)
    assert [t.status for t in children] == [Status.COMPLETED] * 2
    snoozer.refresh_from_db()
    assert (snoozer.status, snoozer.snoozes) == (Status.READY, 1)


class TouchOn(logging.Handler):
    """Make the file `path` when a record says `words`."""

    def __init__(self, words: str, path: Path) -> None:
        super().__init__()
        self.words, self.path = words, path

    def emit(self, record: logging.LogRecord) -> None:
        if self.words in record.getMessage():
            self.path.touch()


def test_run_task_stops_a_task_at_its_run_time_limit_and_waits_for_a_handler_that_runs_on(
    settings, caplog, tmp_path
):
    settings.SCYLLA = {**settings.SCYLLA, "TIMEOUT_GRACE": 0.2}
    checks = Task.objects.submit("t-sleep", {"seconds": 5}, timeout=0.3)
    stopped = run_task(checks.rn)
    assert stopped.status == Status.ABORTED and stopped.errors[0]["code"] == "timeout"
    # The stubborn handler runs on until the grace has passed and it was said (however late
    # a loaded machine runs the watchdog), then returns.
    said = tmp_path / "said"
    ignores = Task.objects.submit("t-stubborn", {"seconds": 60, "until": str(said)}, timeout=0.2)
    touch = TouchOn("still runs", said)
    logging.getLogger("scylla_django").addHandler(touch)
    try:
        waited = run_task(ignores.rn)
    finally:
        logging.getLogger("scylla_django").removeHandler(touch)
    assert waited.status == Status.ABORTED and waited.errors[0]["code"] == "timeout"
    assert f"the handler of {ignores.rn} still runs" in caplog.text
    assert "which waits for it" in caplog.text
