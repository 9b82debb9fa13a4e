"""The worker's test hooks: each step counted once the worker's own state shows it, so a test
waits on the step instead of sleeping or polling the database."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scylla_django.enums import EventType, Status
from scylla_django.models import History, Task
from scylla_django.worker import TaskWorker, WorkerOptions
from scylla_django.worker.hooks import WorkerHooks
from tests import worker_handlers  # noqa: F401  (registers the t-* handlers)
from tests.helpers import start_worker, stop_worker

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_task_is_leased_started_written_in_that_order_and_counted_once():
    worker = TaskWorker(WorkerOptions(["t-echo"], poll_interval=0.05))
    hooks = worker.hooks
    thread = start_worker(worker)
    try:
        task = Task.objects.submit("t-echo", {"n": 1})
        assert hooks.wait_for("written", 1), hooks
        # Counted once the worker's state shows it: the row is written, the slot free.
        assert Task.objects.get(pk=task.pk).status == Status.COMPLETED
        assert not worker._slots.in_hand()
        assert (hooks.count("leased"), hooks.count("started"), hooks.count("written")) == (1, 1, 1)
    finally:
        stop_worker(worker, thread)


def test_heartbeats_are_counted_and_a_stop_yields_what_is_in_hand():
    worker = TaskWorker(
        WorkerOptions(
            ["t-sleep"],
            poll_interval=0.05,
            heartbeat_interval=0.1,
            lease_length=timedelta(minutes=10),
            grace_period=0.0,
        )
    )
    hooks = worker.hooks
    thread = start_worker(worker)
    try:
        task = Task.objects.submit("t-sleep", {"seconds": 600})
        assert hooks.wait_for("started", 1), hooks
        beats = hooks.count("beat")
        assert hooks.wait_for("beat", beats + 2), hooks  # two more heartbeats, not seconds
        assert Task.objects.get(pk=task.pk).status == Status.RUNNING
    finally:
        stop_worker(worker, thread)
    assert hooks.count("yielded") == 1
    last = History.objects.filter(task=task).order_by("pk").last()
    assert last is not None and last.typ == EventType.YIELD


def test_a_handler_past_its_limit_that_ignores_the_stop_is_given_up(settings):
    settings.SCYLLA = {"TIMEOUT_GRACE": 0.2}
    worker = TaskWorker(WorkerOptions(["t-stubborn"], poll_interval=0.05, heartbeat_interval=0.1))
    thread = start_worker(worker)
    try:
        task = Task.objects.submit("t-stubborn", {"seconds": 600}, timeout=0.2)
        assert worker.hooks.wait_for("given_up", 1), worker.hooks
        assert worker.hooks.wait_for("written", 1), worker.hooks
        task.refresh_from_db()
        assert (task.status, task.errors[0]["code"]) == (Status.ABORTED, "timeout")
    finally:
        stop_worker(worker, thread)


def test_a_wait_that_times_out_says_so_and_a_bad_name_is_refused():
    hooks = WorkerHooks()
    assert hooks.wait_for("beat", 1, timeout=0.01) is False
    hooks.note("beat")
    assert hooks.wait_for("beat", 1, timeout=0) is True
    with pytest.raises(ValueError, match="no worker hook named 'beats'"):
        hooks.count("beats")  # type: ignore[arg-type]
