"""The event-driven worker on PostgreSQL: LISTEN wakes it for ready tasks and cancellations."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest
from django.db import connection

from scylla_django import db
from scylla_django.enums import Status
from scylla_django.models import Task
from scylla_django.worker import TaskWorker, WorkerOptions
from tests import worker_handlers  # noqa: F401  (registers the t-* handlers)
from tests.processes import database_url, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

SLOW_POLL = 3600.0  # far longer than any wait below: only a notification wakes the worker


def notify(channel: str, payload: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [channel, payload])


def started(**options) -> tuple[TaskWorker, threading.Thread]:
    worker = TaskWorker(WorkerOptions(["t-echo", "t-sleep"], poll_interval=SLOW_POLL, **options))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    wait_until(lambda: worker.listener is not None, what="the listener")
    assert worker.listener is not None
    assert worker.listener.connected.wait(10), "the listener never connected"
    # Past the first (empty) lease and the one the LISTEN's start asked for: from now on only
    # a notification (or an hour's poll) makes the worker lease.
    wait_until(worker.idle, what="the worker waiting for a wake-up")
    return worker, thread


def stopped(worker: TaskWorker, thread: threading.Thread) -> None:
    worker.stop()
    thread.join(10)
    assert not thread.is_alive()


def completed(task: Task) -> bool:
    return Task.objects.get(pk=task.pk).status == Status.COMPLETED


def test_a_ready_notification_leases_at_once():
    worker, thread = started()
    try:
        task = Task.objects.submit("t-echo", {"n": 1})
        notify(db.READY_CHANNEL, "t-echo")
        wait_until(lambda: completed(task), timeout=60, what="the task, without a poll")
        # A notification for a queue the worker does not serve is ignored. The connection
        # delivers notifications in order: once the next one's task is done, the first was
        # handled.
        other = Task.objects.submit("t-fail", {})
        notify(db.READY_CHANNEL, "t-fail")
        after = Task.objects.submit("t-echo", {"n": 2})
        notify(db.READY_CHANNEL, "t-echo")
        wait_until(lambda: completed(after), timeout=60, what="the next notification's task")
        assert Task.objects.get(pk=other.pk).status == Status.READY
    finally:
        stopped(worker, thread)


def test_a_stop_notification_stops_the_cancelled_handler_at_once():
    # Heartbeats every 10 minutes: without the notification the cancel would take that long.
    worker, thread = started(lease_length=timedelta(hours=1), heartbeat_interval=600)
    try:
        task = Task.objects.submit("t-sleep", {"seconds": 3600})
        notify(db.READY_CHANNEL, "t-sleep")
        wait_until(lambda: worker.in_flight_count() == 1, timeout=60, what="the lease")
        other_name = "worker-0"
        notify(db.STOP_CHANNEL, other_name)  # another worker's cancellation: nothing to do
        Task.objects.get(pk=task.pk).cancel()
        notify(db.STOP_CHANNEL, worker.name)
        wait_until(lambda: not worker._slots.in_hand(), timeout=60, what="the handler to stop")
        assert Task.objects.get(pk=task.pk).status == Status.CANCELLED
    finally:
        stopped(worker, thread)


def test_the_listener_survives_losing_its_connection():
    worker, thread = started()
    try:
        assert worker.listener is not None
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                [f"scylla_django {worker.name}"],
            )
            assert cursor.fetchone() == (True,)
        wait_until(lambda: worker.listener.connections == 2, timeout=60, what="a new LISTEN")
        assert worker.listener.connected.wait(5)
        wait_until(worker.idle, what="the worker waiting again after the new LISTEN's lease")
        task = Task.objects.submit("t-echo", {"after": "reconnect"})
        notify(db.READY_CHANNEL, "t-echo")
        wait_until(lambda: completed(task), timeout=60, what="the task, without a poll")
    finally:
        stopped(worker, thread)


def test_listen_dsn_is_used_for_the_listener():
    dsn = database_url().replace("postgres://", "postgresql://", 1)
    worker, thread = started(listen_dsn=dsn)
    try:
        task = Task.objects.submit("t-echo", {"n": 2})
        notify(db.READY_CHANNEL, "t-echo")
        wait_until(lambda: completed(task), timeout=60, what="the task, without a poll")
    finally:
        stopped(worker, thread)


def submit_notifies() -> bool:
    """Whether `Task.objects.submit` sends a READY notification (the emitter is in place)."""
    with psycopg.connect(database_url(), autocommit=True) as listening:
        listening.execute(f"LISTEN {db.READY_CHANNEL}")
        Task.objects.submit("t-probe", {}, rn="probe")
        notes = list(listening.notifies(timeout=1.0, stop_after=1))
    Task.objects.filter(rn="probe").delete()
    return any(note.payload == "t-probe" for note in notes)


def test_submit_starts_the_handler_well_within_the_poll_interval():
    """End to end: nobody but `submit` notifies, and the idle worker starts the task at once."""
    if not submit_notifies():
        pytest.skip("Task.objects.submit does not NOTIFY yet")
    worker, thread = started()
    try:
        task = Task.objects.submit("t-echo", {"n": 3})
        wait_until(lambda: completed(task), timeout=60, what="the task, without a poll")
    finally:
        stopped(worker, thread)
