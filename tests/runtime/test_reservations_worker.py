"""The worker's side of lease reservations (docs/howto/crashes.md), driven in-process: the
heartbeat reports the handlers started since the last one, and a task whose earlier lease
expired unstarted has its start recorded before its handler runs, before any heartbeat."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from scylla_django.enums import Status
from scylla_django.models import Task, TaskQuerySet
from scylla_django.worker import TaskWorker, WorkerOptions
from tests import worker_handlers  # noqa: F401  (registers the t-* handlers)

pytestmark = pytest.mark.django_db(transaction=True)


def started_worker(options: WorkerOptions) -> tuple[TaskWorker, threading.Thread]:
    worker = TaskWorker(options)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, thread


def stop(worker: TaskWorker, thread: threading.Thread, *tasks: Task) -> None:
    Task.objects.filter(pk__in=[t.pk for t in tasks]).cancel()
    worker.stop()
    thread.join(30)
    assert not thread.is_alive()


# No heartbeat comes within the test: the first is 14 s after the worker starts.
QUIET = {"lease_length": timedelta(seconds=60), "heartbeat_interval": 14, "poll_interval": 0.05}


def test_a_task_leased_again_after_an_unstarted_lease_records_its_start_before_its_handler():
    """A poison pill that kills its worker before the first heartbeat is never reported
    started; once its lease expired unstarted, the worker records its start (one fenced
    write) before its handler runs, so that its next crash counts."""
    task = Task.objects.submit("t-sleep", {"seconds": 30})
    Task.objects.filter(pk=task.pk).update(unstarted=1)  # a lease of it expired unstarted
    worker, thread = started_worker(WorkerOptions(["t-sleep"], **QUIET))
    try:
        assert worker.hooks.wait_for("started")
        assert worker.hooks.count("recorded") == 1  # before the handler started
        assert worker.hooks.count("beat") == 0
        running = Task.objects.get(pk=task.pk)
        assert running.status == Status.RUNNING and running.handler_started
        assert running.deadline - running.updated == timedelta(seconds=60)  # a full lease
    finally:
        stop(worker, thread, task)


def test_a_first_lease_is_a_reservation_until_the_heartbeat_reports_its_start():
    """No statement of its own: a task leased for the first time is reported started by the
    next heartbeat, and its lease is a reservation until then."""
    task = Task.objects.submit("t-sleep", {"seconds": 30})
    options = WorkerOptions(["t-sleep"], **QUIET)
    worker, thread = started_worker(options)
    try:
        assert worker.hooks.wait_for("started")
        assert worker.hooks.count("recorded") == 0
        running = Task.objects.get(pk=task.pk)
        assert running.status == Status.RUNNING and not running.handler_started
        assert running.deadline - running.updated == options.reservation == timedelta(seconds=42)
    finally:
        stop(worker, thread, task)


def test_the_heartbeat_tells_the_database_which_handlers_started():
    started = Task.objects.submit("t-sleep", {"seconds": 30}, priority=1)
    options = WorkerOptions(
        ["t-sleep"], lease_length=timedelta(seconds=20), heartbeat_interval=0.2, poll_interval=0.05
    )
    worker, thread = started_worker(options)
    try:
        assert worker.hooks.wait_for("started")
        beats = worker.hooks.count("beat")
        assert worker.hooks.wait_for("beat", beats + 2)  # one sent after the start
        running = Task.objects.get(pk=started.pk)
        assert running.handler_started
        assert running.deadline - running.updated == timedelta(seconds=20)
        assert worker.hooks.count("recorded") == 0  # the heartbeat told it
    finally:
        stop(worker, thread, started)


def test_a_refused_start_record_does_not_run_the_handler(tmp_path, monkeypatch):
    """A task whose lease was lost before its start could be recorded is not run."""
    path = tmp_path / "starts.log"
    task = Task.objects.submit("t-poison", {"path": str(path), "poison": True})
    Task.objects.filter(pk=task.pk).update(unstarted=1)

    def lost(self, worker, leases, **kwargs):  # taken over meanwhile: the record is refused
        Task.objects.filter(pk__in=list(leases)).update(owner="worker-0")
        return set()

    monkeypatch.setattr(TaskQuerySet, "heartbeat_many", lost)
    worker = TaskWorker(WorkerOptions(["t-poison"], **QUIET))
    worker.run(once=True)
    assert worker.hooks.count("started") == 0 and worker.hooks.count("recorded") == 0
    assert not path.exists()  # the pill never ran: this process is alive
