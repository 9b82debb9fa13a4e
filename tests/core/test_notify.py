"""NOTIFY on PostgreSQL, received by a real LISTEN connection.

READY_CHANNEL carries a queue that got leasable tasks (submit, submit_many, reset, yield);
STOP_CHANNEL carries the worker whose running task was cancelled.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from scylla_django.db import READY_CHANNEL, STOP_CHANNEL
from scylla_django.models import Task, Worker
from tests.factories import running_task
from tests.helpers import expire

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


class Listener:
    def __init__(self, conn: object) -> None:
        self.conn = conn

    def received(self, wait: float = 0.5) -> list[tuple[str, str]]:
        """Every notification that arrives within `wait` seconds, in order."""
        return [(n.channel, n.payload) for n in self.conn.notifies(timeout=wait)]  # type: ignore[attr-defined]


@pytest.fixture
def listener() -> Iterator[Listener]:
    import psycopg

    settings = connection.settings_dict
    conn = psycopg.connect(
        dbname=settings["NAME"],
        user=settings["USER"] or None,
        password=settings["PASSWORD"] or None,
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
        autocommit=True,
    )
    try:
        conn.execute(f"LISTEN {READY_CHANNEL}")
        conn.execute(f"LISTEN {STOP_CHANNEL}")
        yield Listener(conn)
    finally:
        conn.close()


def test_submit_notifies_its_queue_unless_the_task_is_delayed(listener):
    Task.objects.submit("mail", {})
    Task.objects.submit("late", {}, not_before=timezone.now() + timedelta(hours=1))
    assert listener.received() == [(READY_CHANNEL, "mail")]


def test_a_duplicate_submission_notifies_nothing(listener):
    Task.objects.submit("mail", {}, rn="once")
    assert listener.received() == [(READY_CHANNEL, "mail")]
    with pytest.raises(Exception, match="exists"):
        Task.objects.submit("mail", {}, rn="once")
    assert listener.received() == []


def test_submit_many_notifies_each_queue_once(listener):
    later = timezone.now() + timedelta(hours=1)
    Task.objects.submit_many(
        [
            {"queue": "a", "spec": 1},
            {"queue": "b", "spec": 2},
            {"queue": "a", "spec": 3},
            {"queue": "c", "spec": 4, "not_before": later},
        ]
    )
    assert sorted(listener.received()) == [(READY_CHANNEL, "a"), (READY_CHANNEL, "b")]


def test_reset_notifies_the_queues_made_ready(worker, listener):
    task = running_task(worker, queue="default")
    listener.received(0.2)
    expire(task)
    assert Task.objects.reset_expired() == 1
    assert listener.received() == [(READY_CHANNEL, "default")]


def test_yield_notifies_the_queue(worker, listener):
    task = running_task(worker, queue="default")
    listener.received(0.2)
    task.yield_lease(worker)
    assert listener.received() == [(READY_CHANNEL, "default")]


def test_cancelling_a_running_task_notifies_its_owner(worker, listener):
    task = running_task(worker, queue="default")
    ready = Task.objects.submit("default", {})
    listener.received(0.2)
    ready.cancel()
    assert listener.received() == []
    task.cancel()
    assert listener.received() == [(STOP_CHANNEL, worker.name)]


def test_cancelling_a_selection_notifies_each_owner_of_a_running_task(worker, listener):
    other = Worker.objects.register(queues=["default"])
    running_task(worker, queue="default")
    running_task(other, queue="default")
    Task.objects.submit("default", {})
    listener.received(0.2)
    assert Task.objects.all().cancel() == 3
    assert sorted(listener.received()) == [(STOP_CHANNEL, worker.name), (STOP_CHANNEL, other.name)]
