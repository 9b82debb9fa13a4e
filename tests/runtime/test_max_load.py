"""`--max-load`: a worker whose host's load is over its limit leases nothing, records why
(every ready task of its queue says `load_high`), and leases again once the load is back
under; the load is read by an injectable reader, so no test loads the machine."""

from __future__ import annotations

import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from scylla_django.enums import Status
from scylla_django.models import Task, Worker
from scylla_django.worker import TaskWorker, WorkerOptions
from tests import worker_handlers  # noqa: F401  (registers the t-* handlers)
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


class Load:
    """A host load that a test sets."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.readers: list[str] = []  # the threads that read it, in turn

    def __call__(self) -> float:
        self.readers.append(threading.current_thread().name)
        return self.value


def test_a_worker_over_its_max_load_leases_nothing_and_says_why():
    load = Load(7.5)
    worker = TaskWorker(
        WorkerOptions(["t-echo"], poll_interval=0.05, max_load=3.5, load_reader=load)
    )
    hooks = worker.hooks
    task = Task.objects.submit("t-echo", {"n": 1})
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert hooks.wait_for("held_back", 3), hooks
        task.refresh_from_db()
        assert (task.status, task.leases) == (Status.READY, 0)
        row = Worker.objects.get(pk=worker.worker.pk)
        assert (row.max_load, row.overload) == (3.5, 7.5)
        [reason] = [r for r in task.waiting_reasons() if r["code"] == "load_high"]
        assert reason["workers"] == [{"name": worker.name, "load": 7.5, "max_load": 3.5}]
        assert "7.50 > 3.5" in reason["detail"]
        load.value = 1.0
        assert hooks.wait_for("written", 1), hooks
        task.refresh_from_db()
        assert task.status == Status.COMPLETED
        assert Worker.objects.get(pk=worker.worker.pk).overload is None
        assert "load_high" not in [r["code"] for r in task.waiting_reasons()]
    finally:
        worker.stop()
        thread.join(60)
    assert not thread.is_alive()


def test_a_bundle_handler_s_queue_is_held_back_too():
    load = Load(9.0)
    worker = TaskWorker(
        WorkerOptions(["t-bundle", "t-echo"], poll_interval=0.05, max_load=2, load_reader=load)
    )
    hooks = worker.hooks
    member = Task.objects.submit("t-bundle", {"n": 1})
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert hooks.wait_for("held_back", 2), hooks
        wait_until(lambda: load.readers.count("scylla-bundle-t-bundle") >= 3, what="the bundler")
        member.refresh_from_db()
        assert (member.status, member.leases) == (Status.READY, 0)
        load.value = 0.5
        assert hooks.wait_for("written", 1), hooks
        member.refresh_from_db()
        assert member.status == Status.COMPLETED
    finally:
        worker.stop()
        thread.join(60)
    assert not thread.is_alive()


def test_another_worker_under_its_load_serves_the_queue(worker):
    """`load_high` only when every live worker of the queue is held back."""
    held_back = Worker.objects.register(["default"], 1, max_load=2.0)
    held_back.record_overload(4.0)
    task = Task.objects.submit("default", {})
    assert "load_high" not in [r["code"] for r in task.waiting_reasons()]
    Worker.objects.filter(pk=worker.pk).update(stopped=worker.last_seen)
    assert "load_high" in [r["code"] for r in task.waiting_reasons()]


def test_a_bad_max_load_is_refused():
    with pytest.raises(ValueError, match="max_load"):
        WorkerOptions(["t-echo"], max_load=0)
    with pytest.raises(CommandError, match="must be a positive number"):
        call_command("scylla_worker", "--queue=t-echo", "--max-load=-1", "--once")
